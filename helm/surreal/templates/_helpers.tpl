{{/*
Every choice here mirrors orchestrator/kube_render.py and kube_pods.py; tests/kube/test_chart.py
compares the two renderings object by object.
*/}}

{{/*
Constants of orchestrator/kube_render.py, each defined once here; tests/kube/test_chart.py ties
each to its Python name, so a change on one side only fails the tests.
*/}}
{{/* The failure policy of orchestrator/policy.py (retries per role, per index for actors): crashes before a Job fails. */}}
{{- define "surreal.learnerRetries" -}}5{{- end -}}
{{- define "surreal.actorRetries" -}}5{{- end -}}
{{- define "surreal.evaluatorRetries" -}}5{{- end -}}
{{- define "surreal.replayRetries" -}}5{{- end -}}
{{/* LEARNER_GRACE_SECONDS: SIGTERM -> SIGKILL of a learner pod (it writes a checkpoint). */}}
{{- define "surreal.learnerGraceSeconds" -}}30{{- end -}}
{{/* EXIT_PREEMPTED: stopped from outside, a learner's checkpoint written (not a failure). */}}
{{- define "surreal.exitPreempted" -}}143{{- end -}}
{{/* EXIT_LEARNER_GONE: a worker whose learner is gone for good (fails its Job at once). */}}
{{- define "surreal.exitLearnerGone" -}}69{{- end -}}
{{/* EXIT_GROUP_NOT_FORMED: a learner whose ranks did not form their group (fails its Job at once). */}}
{{- define "surreal.exitGroupNotFormed" -}}70{{- end -}}
{{/* EXIT_NO_ACTORS: a learner whose actors' Job failed (no actor is left: fails its Job at once). */}}
{{- define "surreal.exitNoActors" -}}71{{- end -}}
{{/* EXIT_ENV_FAILED: the user's environment failed in a component, as it would again (fails its Job at once). */}}
{{- define "surreal.exitEnvFailed" -}}73{{- end -}}
{{- /* A learner that ended without training, or made no progress for its deadline. */ -}}
{{- define "surreal.exitNotTrained" -}}74{{- end -}}
{{- /* The algorithm's code failed (a hook raised or returned what it must not). */ -}}
{{- define "surreal.exitAlgorithmFailed" -}}75{{- end -}}
{{/* RANKS_CONTROL_PORT: where pod 0 of learner pods serves the ranks' control store. */}}
{{- define "surreal.ranksControlPort" -}}29400{{- end -}}
{{/* REPLAY_PORT: every replay shard's port (each shard is a pod of its own). */}}
{{- define "surreal.replayPort" -}}7000{{- end -}}
{{/* The algorithms that train from replay shards (their `roles` include replay). */}}
{{- define "surreal.replayAlgos" -}}sac,td3,dqn{{- end -}}
{{/* QUEUE_LABEL: Kueue's label naming the LocalQueue that admits a Job. */}}
{{- define "surreal.queueLabel" -}}kueue.x-k8s.io/queue-name{{- end -}}

{{/* The experiment name: the release name, checked as surreal checks experiment names. */}}
{{- define "surreal.name" -}}
{{- $n := .Release.Name -}}
{{- if gt (len $n) 40 -}}
{{- fail (printf "release name %q is longer than 40 characters (it names the experiment's objects)" $n) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $n) -}}
{{- fail (printf "release name %q must be a DNS-1123 label (lower-case letters, digits, '-')" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{- define "surreal.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* Actor pods: agents / agentsPerPod; a remainder would leave agents without a pod. */}}
{{- define "surreal.workers" -}}
{{- $agents := int .Values.agents -}}
{{- $per := int .Values.agentsPerPod -}}
{{- if lt $per 1 -}}{{- fail "agentsPerPod must be a positive integer" -}}{{- end -}}
{{- if ne (mod $agents $per) 0 -}}
{{- fail (printf "agents (%d) must be a multiple of agentsPerPod (%d): every actor pod hosts agentsPerPod agents" $agents $per) -}}
{{- end -}}
{{- div $agents $per -}}
{{- end -}}

{{/* Learner ranks: each serves the actor pods of its index modulo the ranks, so each needs one;
ES trains with one learner (the CLI's refusals, word for word). */}}
{{- define "surreal.learners" -}}
{{- $learners := int (.Values.learners | default 1) -}}
{{- if gt $learners 1 -}}
{{- if eq .Values.algo "es" -}}
{{- fail (printf "learners %d: es trains with one learner (its results are a few numbers per episode; one learner is never its bottleneck)" $learners) -}}
{{- end -}}
{{- $pods := include "surreal.workers" . | int -}}
{{- if lt $pods $learners -}}
{{- fail (printf "%d learner ranks need an actor pod each, and there would be %d (every rank serves its own pods)" $learners $pods) -}}
{{- end -}}
{{- end -}}
{{- $learners -}}
{{- end -}}

{{/* Learner pods (learnerPods, the CLI's --learner-pods): the ranks spread evenly over them. */}}
{{- define "surreal.learnerPods" -}}
{{- $pods := int (.Values.learnerPods | default 1) -}}
{{- $learners := include "surreal.learners" . | int -}}
{{- if or (gt $pods $learners) (ne (mod $learners $pods) 0) -}}
{{- fail (printf "learner_pods %d: the %d learner ranks must spread evenly over the learner pods (learner_pods must divide learners)" $pods $learners) -}}
{{- end -}}
{{- $pods -}}
{{- end -}}

{{/* Learner ranks in one learner pod, on ports 6000.. of that pod. */}}
{{- define "surreal.localRanks" -}}
{{- div (include "surreal.learners" . | int) (include "surreal.learnerPods" . | int) -}}
{{- end -}}

{{/* Replay shards (replayShards, the CLI's --replay-shards): an off-policy algorithm's, 1 unless
set; none for an on-policy one, which refuses more (the CLI's refusal, word for word). */}}
{{- define "surreal.replayShards" -}}
{{- $shards := int (.Values.replayShards | default 0) -}}
{{- $offPolicy := has .Values.algo (splitList "," (include "surreal.replayAlgos" .)) -}}
{{- if and (eq $shards 0) $offPolicy -}}{{- $shards = 1 -}}{{- end -}}
{{- if and (gt $shards 1) (not $offPolicy) -}}
{{- fail (printf "replay_shards %d: %s learns on-policy and keeps no replay (an off-policy algorithm does: sac, td3, dqn)" $shards .Values.algo) -}}
{{- end -}}
{{- if not $offPolicy -}}{{- $shards = 0 -}}{{- end -}}
{{- $shards -}}
{{- end -}}

{{/* Each replay shard's address (render.replay_hosts), comma-separated: an Indexed Job's pod
<job>-<index>, resolved through the headless Service NAME-replay that is its subdomain. */}}
{{- define "surreal.replayAddr" -}}
{{- $service := printf "%s-replay" (include "surreal.name" .) -}}
{{- $job := include "surreal.jobName" (dict "root" . "part" "replay") -}}
{{- $addrs := list -}}
{{- range $i := until (include "surreal.replayShards" . | int) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s:%s" $job $i $service (include "surreal.replayPort" $)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* The Job of a part ("learner", "learner-peers" or "replay"); (dict "root" $ "part" PART): its own
NAME-PART, or in a queued experiment's JobSet the name the JobSet controller gives it,
<jobset>-<replicatedJob>-0 (render.job_names). */}}
{{- define "surreal.jobName" -}}
{{- printf "%s-%s%s" (include "surreal.name" .root) .part (ternary "-0" "" (not (empty .root.Values.queue))) -}}
{{- end -}}

{{/* Each learner pod's stable name (render.learner_pod_hosts), comma-separated: an Indexed Job's
pod <job>-<index>, resolved through the headless Service NAME-ranks that is its subdomain. Pod 0
is the learner Job's, pods 1.. the peers Job's. */}}
{{- define "surreal.learnerHosts" -}}
{{- $ranks := printf "%s-ranks" (include "surreal.name" .) -}}
{{- $hosts := list (printf "%s-0.%s" (include "surreal.jobName" (dict "root" . "part" "learner")) $ranks) -}}
{{- $peers := include "surreal.jobName" (dict "root" . "part" "learner-peers") -}}
{{- range $i := until (sub (include "surreal.learnerPods" . | int) 1 | int) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s" $peers $i $ranks) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

{{/* The learner's address, a host:port per rank: with one learner pod the Service's name, rank r
on 6000 + r; with learner pods each pod's stable name, its ranks on 6000.. (render.kube_target). */}}
{{- define "surreal.learnerAddr" -}}
{{- $name := include "surreal.name" . -}}
{{- $addrs := list -}}
{{- if eq (include "surreal.learnerPods" . | int) 1 -}}
{{- range $rank := until (include "surreal.learners" . | int) -}}
{{- $addrs = append $addrs (printf "%s-learner:%d" $name (add 6000 $rank)) -}}
{{- end -}}
{{- else -}}
{{- $local := include "surreal.localRanks" . | int -}}
{{- range $host := splitList "," (include "surreal.learnerHosts" .) -}}
{{- range $rank := until $local -}}
{{- $addrs = append $addrs (printf "%s:%d" $host (add 6000 $rank)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* The control store of learner pods: pod 0's, on RANKS_CONTROL_PORT. */}}
{{- define "surreal.ranksControl" -}}
{{- printf "%s:%s" (first (splitList "," (include "surreal.learnerHosts" .))) (include "surreal.ranksControlPort" .) -}}
{{- end -}}

{{/* Port name of a learner rank: grpc for rank 0, grpc-R for rank R. */}}
{{- define "surreal.rankPortName" -}}
{{- if eq (int .) 0 -}}grpc{{- else -}}grpc-{{ . }}{{- end -}}
{{- end -}}

{{/* Labels; call with (dict "root" $ "component" ROLE). */}}
{{- define "surreal.labels" -}}
app.kubernetes.io/name: surreal
app.kubernetes.io/instance: {{ include "surreal.name" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
surreal.io/experiment: {{ include "surreal.name" .root }}
surreal.io/component: {{ .component }}
{{- end -}}

{{- define "surreal.selector" -}}
surreal.io/experiment: {{ include "surreal.name" .root }}
surreal.io/component: {{ .component }}
{{- end -}}

{{/* metadata of an object; (dict "root" $ "component" ROLE "name" NAME). */}}
{{- define "surreal.metadata" -}}
name: {{ .name }}
namespace: {{ include "surreal.namespace" .root }}
labels:
  {{- include "surreal.labels" . | nindent 2 }}
{{- end -}}

{{/* The affinity of a pod that mounts the learner's claim (render.beside_learner): ReadWriteOnce
means one node, not one pod, so it runs on the learner's node. */}}
{{- define "surreal.besideLearner" -}}
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchLabels:
            {{- include "surreal.selector" (dict "root" . "component" "learner") | nindent 12 }}
        topologyKey: kubernetes.io/hostname
{{- end -}}

{{/* Resources of a role, with nvidia.com/gpu in requests and limits when it has GPUs. */}}
{{- define "surreal.resources" -}}
{{- $role := index .root.Values .role -}}
{{- $gpu := int ($role.gpu | default 0) -}}
{{- if and (eq $gpu 0) (eq .role "learner") -}}{{- $gpu = int .root.Values.gpu -}}{{- end -}}
{{- $requests := deepCopy ($role.resources.requests | default dict) -}}
{{- $limits := deepCopy ($role.resources.limits | default dict) -}}
{{- if gt $gpu 0 -}}
{{- $_ := set $requests "nvidia.com/gpu" (toString $gpu) -}}
{{- $_ := set $limits "nvidia.com/gpu" (toString $gpu) -}}
{{- end -}}
{{- toYaml (dict "requests" $requests "limits" $limits) -}}
{{- end -}}

{{- define "surreal.containerSecurity" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Pod-level settings shared by every pod; (dict "root" $ "placement" ROLE-VALUES ["account"
NAME]). Only a pod that names its account (the components, which watch their Jobs) gets a token. */}}
{{- define "surreal.podCommon" -}}
{{- if .account }}
serviceAccountName: {{ .account }}
automountServiceAccountToken: true
{{- else }}
automountServiceAccountToken: false
{{- end }}
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  fsGroupChangePolicy: OnRootMismatch
  seccompProfile:
    type: RuntimeDefault
{{- with .placement.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .placement.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The container of a component; (dict "root" $ "role" ROLE). Its env, sorted by name as the
CLI writes it, is exactly the component's (orchestrator/program.py). */}}
{{- define "surreal.container" -}}
{{- $name := include "surreal.name" .root -}}
{{- $env := dict
  "SURREAL_EXP_DIR" "/var/lib/surreal"
  "SURREAL_LEARNER_ADDR" (include "surreal.learnerAddr" .root)
  "SURREAL_TOKEN_FILE" "/var/run/secrets/surreal/token"
  "SURREAL_JOBS_WATCH" (printf "kube:%s/%s%s" (include "surreal.namespace" .root) $name (ternary "/jobset" "" (not (empty .root.Values.queue))))
-}}
{{- $pods := include "surreal.learnerPods" .root | int -}}
{{- if gt (include "surreal.replayShards" .root | int) 0 -}}
{{- $_ := set $env "SURREAL_REPLAY_ADDR" (include "surreal.replayAddr" .root) -}}
{{- end -}}
{{- if eq .role "replay" -}}
{{- $_ := set $env "SURREAL_BIND_HOST" "0.0.0.0" -}}
{{- else if eq .role "learner" -}}
{{- $_ := set $env "SURREAL_BIND_HOST" "0.0.0.0" -}}
{{- $_ := set $env "SURREAL_TERMINATION_LOG" "/dev/termination-log" -}}
{{- if gt $pods 1 -}}
{{- $_ := set $env "SURREAL_LEARNER_PODS" (toString $pods) -}}
{{- $_ := set $env "SURREAL_RANKS_CONTROL" (include "surreal.ranksControl" .root) -}}
{{- if .peer -}}{{- $_ := set $env "SURREAL_LEARNER_POD" "1" -}}{{- end -}}
{{- end -}}
{{- else if eq .role "actor" -}}
{{- $_ := set $env "SURREAL_AGENTS_IN_WORKER" (toString (int .root.Values.agentsPerPod)) -}}
{{- end -}}
- name: {{ .role }}
  image: {{ .root.Values.image }}
  imagePullPolicy: {{ .root.Values.imagePullPolicy }}
  command: [surreal]
  {{- /* Every actor pod runs worker 0's argv: its worker index is its Job completion index. */}}
  args: [component, {{ .role }}, --spec, /etc/surreal/spec.yaml, --index, "0"]
  env:
    {{- range $key := keys $env | sortAlpha }}
    - name: {{ $key }}
      value: {{ index $env $key | quote }}
    {{- end }}
  {{- if has .role (list "learner" "replay") }}
  {{- $port := ternary (include "surreal.replayPort" .) 6000 (eq .role "replay") }}
  ports:
    {{- if eq .role "replay" }}
    - name: grpc
      containerPort: {{ $port }}
      protocol: TCP
    {{- else }}
    {{- range $rank := until (include "surreal.localRanks" .root | int) }}
    - name: {{ include "surreal.rankPortName" $rank }}
      containerPort: {{ add 6000 $rank }}
      protocol: TCP
    {{- end }}
    {{- end }}
    {{- if and (eq .role "learner") (gt $pods 1) }}
    - name: control
      containerPort: {{ include "surreal.ranksControlPort" . }}
      protocol: TCP
    {{- end }}
  startupProbe:
    grpc: {port: {{ $port }}}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 60
  readinessProbe:
    grpc: {port: {{ $port }}}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 3
  livenessProbe:
    grpc: {port: {{ $port }}}
    periodSeconds: 20
    timeoutSeconds: 10
    failureThreshold: 6
  {{- end }}
  resources:
    {{- include "surreal.resources" (dict "root" .root "role" .role) | nindent 4 }}
  securityContext:
    {{- include "surreal.containerSecurity" . | nindent 4 }}
  volumeMounts:
    - {name: spec, mountPath: /etc/surreal, readOnly: true}
    - {name: token, mountPath: /var/run/secrets/surreal, readOnly: true}
    - {name: tmp, mountPath: /tmp}
    - {name: shm, mountPath: /dev/shm}
    - {name: data, mountPath: /var/lib/surreal}
  # The learner writes its final status there; without one (a crash), the message is the log's
  # tail, which names the error.
  terminationMessagePath: /dev/termination-log
  terminationMessagePolicy: FallbackToLogsOnError
{{- end -}}

{{/* Volumes of a component pod; (dict "root" $ "role" ROLE). The exp dir ("data") is the
learner's claim with storage.type=pvc, for the learner (not its peers) and the replay shards (which
save their rows there on SIGTERM); otherwise, and for actors and the evaluator, which keep
nothing, scratch space. */}}
{{- define "surreal.volumes" -}}
{{- $name := include "surreal.name" .root -}}
- name: spec
  configMap:
    name: {{ $name }}-spec
- name: token
  secret:
    secretName: {{ $name }}-token
    defaultMode: 288  # 0440
- name: tmp
  emptyDir: {}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: 256Mi
- name: data
  {{- if and (eq .root.Values.storage.type "pvc") (or (and (eq .role "learner") (not .peer)) (eq .role "replay")) }}
  persistentVolumeClaim:
    claimName: {{ $name }}-data
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}

{{/*
The Job of a role: PODS indexed pods that each run to completion; (dict "root" $ "role" ROLE
"pods" PODS). A crash is a failed pod that the Job replaces, up to the role's retries (per index
for actors, so one crashing actor fails no other); disruptions (a drained or preempted node, a
SIGTERM answered with a checkpoint) do not count, and a worker whose learner is gone for good
fails its Job at once. With a queue the Jobs are a JobSet's (jobset.yaml).
*/}}
{{- define "surreal.job" -}}
{{- $name := include "surreal.name" .root -}}
apiVersion: batch/v1
kind: Job
metadata:
  {{- include "surreal.metadata" (dict "root" .root "component" .role "name" (printf "%s-%s" $name (ternary "learner-peers" .role (not (empty .peer))))) | nindent 2 }}
spec:
  {{- include "surreal.jobSpec" . | nindent 2 }}
{{- end -}}

{{/*
A Job's spec (surreal.job's; a queued experiment's JobSet holds the same in its replicated Jobs).
*/}}
{{- define "surreal.jobSpec" -}}
{{- $name := include "surreal.name" .root -}}
{{- $role := .role -}}
completionMode: Indexed
completions: {{ .pods }}
parallelism: {{ .pods }}
{{- if eq $role "actor" }}
backoffLimitPerIndex: {{ include "surreal.actorRetries" . }}
{{- else if eq $role "replay" }}
backoffLimitPerIndex: {{ include "surreal.replayRetries" . }}
{{- else if eq $role "learner" }}
backoffLimit: {{ include "surreal.learnerRetries" . }}
{{- else }}
backoffLimit: {{ include "surreal.evaluatorRetries" . }}
{{- end }}
podFailurePolicy:
  rules:
    # A drained, preempted or evicted node: not the pod's fault.
    - action: Ignore
      onPodConditions:
        - {type: DisruptionTarget, status: "True"}
    # Stopped from outside, with a learner's checkpoint written first.
    - action: Ignore
      onExitCodes:
        containerName: {{ $role }}
        operator: In
        values: [{{ include "surreal.exitPreempted" . }}]
    {{- if eq $role "replay" }}
    # The user's environment or algorithm failed: retrying cannot help.
    - action: FailJob
      onExitCodes:
        containerName: {{ $role }}
        operator: In
        values: [{{ include "surreal.exitEnvFailed" . }}, {{ include "surreal.exitAlgorithmFailed" . }}]
    {{- else if ne $role "learner" }}
    # Its learner is gone for good, or the user's environment or algorithm failed: retrying cannot help.
    - action: FailJob
      onExitCodes:
        containerName: {{ $role }}
        operator: In
        values: [{{ include "surreal.exitLearnerGone" . }}, {{ include "surreal.exitEnvFailed" . }}, {{ include "surreal.exitAlgorithmFailed" . }}]
    {{- else }}
    # Its ranks did not form their group (one hung before joining), no actor is left to feed it
    # (the actors' Job failed), the user's environment failed, the run cannot train as it is (no
    # update applied, no progress for its deadline) or the algorithm failed: retrying cannot help.
    - action: FailJob
      onExitCodes:
        containerName: {{ $role }}
        operator: In
        values: [{{ include "surreal.exitGroupNotFormed" . }}, {{ include "surreal.exitNoActors" . }}, {{ include "surreal.exitEnvFailed" . }}, {{ include "surreal.exitNotTrained" . }}, {{ include "surreal.exitAlgorithmFailed" . }}]
    {{- end }}
template:
  metadata:
    labels:
      {{- include "surreal.labels" (dict "root" .root "component" $role) | nindent 6 }}
  spec:
    {{- $placement := index .root.Values $role }}
    {{- $besideLearner := and (eq $role "replay") (eq .root.Values.storage.type "pvc") }}
    {{- if $besideLearner }}
    {{- /* The learner's claim is ReadWriteOnce: one node, the learner's (as TensorBoard). */}}
    {{- $placement = dict "nodeSelector" .root.Values.learner.nodeSelector "tolerations" .root.Values.learner.tolerations }}
    {{- end }}
    {{- include "surreal.podCommon" (dict "root" .root "placement" $placement "account" (printf "%s-watch" $name)) | nindent 4 }}
    {{- if $besideLearner }}
    {{- include "surreal.besideLearner" .root | nindent 4 }}
    {{- end }}
    # A Job's pod is never restarted in place (podFailurePolicy needs Never); one that exits 0
    # is done.
    restartPolicy: Never
    {{- if eq $role "learner" }}
    terminationGracePeriodSeconds: {{ include "surreal.learnerGraceSeconds" . }}
    {{- if gt (include "surreal.learnerPods" .root | int) 1 }}
    # <job>-<index>.NAME-ranks: the headless Service ranks.yaml renders.
    subdomain: {{ $name }}-ranks
    {{- end }}
    {{- end }}
    {{- if eq $role "replay" }}
    # <job>-<index>.NAME-replay: the headless Service replay.yaml renders.
    subdomain: {{ $name }}-replay
    {{- end }}
    containers:
      {{- include "surreal.container" (dict "root" .root "role" $role "peer" .peer) | nindent 6 }}
    volumes:
      {{- include "surreal.volumes" (dict "root" .root "role" $role "peer" .peer) | nindent 6 }}
{{- end -}}
