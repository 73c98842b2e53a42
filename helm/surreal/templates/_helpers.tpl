{{/*
Every choice here mirrors orchestrator/kube_render.py and kube_pods.py; tests/kube/test_chart.py
compares the two renderings object by object.
*/}}

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

{{/* Pod-level settings shared by every pod; (dict "root" $ "placement" ROLE-VALUES). */}}
{{- define "surreal.podCommon" -}}
automountServiceAccountToken: false
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

{{/* The container of a component; (dict "root" $ "role" ROLE "env" EXTRA-ENV-YAML "tail" EXTRA-ENV-YAML). */}}
{{- define "surreal.container" -}}
{{- $name := include "surreal.name" .root -}}
- name: {{ .role }}
  image: {{ .root.Values.image }}
  imagePullPolicy: {{ .root.Values.imagePullPolicy }}
  command: [surreal]
  args: [component, {{ .role }}, --spec, /etc/surreal/spec.yaml, --index, "0"]
  env:
    {{- with .env }}
    {{- . | nindent 4 }}
    {{- end }}
    - name: SURREAL_EXP_DIR
      value: /var/lib/surreal
    - name: SURREAL_LEARNER_ADDR
      value: {{ printf "%s-learner:6000" $name }}
    - name: SURREAL_LINGER
      value: "1"
    - name: SURREAL_TOKEN_FILE
      value: /var/run/secrets/surreal/token
    {{- with .tail }}
    {{- . | nindent 4 }}
    {{- end }}
  {{- if eq .role "learner" }}
  ports:
    - name: grpc
      containerPort: 6000
      protocol: TCP
  startupProbe:
    grpc: {port: 6000}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 60
  readinessProbe:
    grpc: {port: 6000}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 3
  livenessProbe:
    grpc: {port: 6000}
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
{{- end -}}

{{/* Volumes of a component pod; (dict "root" $ "scratch" BOOL): scratch adds an emptyDir exp dir. */}}
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
{{- if .scratch }}
- name: data
  emptyDir: {}
{{- end }}
{{- end -}}
