"""Every exit code a component gives that means something to the runtime and the failure policy
(orchestrator/policy.py turns them into each role's fatal and disruption exits; the kube renderer
into each Job's podFailurePolicy). Any other non-zero exit is a crash, retried within the role's
budget."""

# The exit code of a worker or evaluator whose learner is gone for good (EX_UNAVAILABLE): the
# Jobs' podFailurePolicy fails the experiment's workers on it instead of retrying them.
EXIT_LEARNER_GONE = 69
# The exit of a learner whose ranks did not form their group in time (a rank hung before it joined):
# retrying cannot help, so it fails the learner role at once (one of its fatal exits).
EXIT_GROUP_NOT_FORMED = 70
# The exit of a learner that no actor is left to feed (on Kubernetes: the actors' Job failed, which
# the learner's cluster watch saw, orchestrator/kube/watch.py): a fatal exit of the learner role.
EXIT_NO_ACTORS = 71
# The exit of a learner rank whose collective raised (ranks.CollectiveFailed: a peer rank or pod
# gone or hung); a rank's code, seen only by its pod's agent, never a component's.
EXIT_COLLECTIVE_FAILED = 72
# The exit of a component whose environment failed (envs.make.EnvFailed: the user's environment
# raised, or an actor's gave nothing but non-finite data): retrying runs the same code again, so it
# fails the role at once, whichever role it is (a fatal exit of each).
EXIT_ENV_FAILED = 73
# The exit of a learner whose run cannot succeed as it is: it ended without training (no update
# applied: every one skipped, or learning never started) or made no progress for its deadline
# (config `progress_deadline_seconds`). Retrying runs the same settings again: a fatal exit.
EXIT_NOT_TRAINED = 74
# The exit of a component whose algorithm's code failed (a hook raised, returned what it must not,
# or ended the process itself): the message names the algorithm, the hook and what it did; retrying
# runs the same code again, so it fails the role at once, whichever role it is.
EXIT_ALGORITHM_FAILED = 75
# 128 + SIGTERM, what a process killed by the signal reports: the pod's exit code after a clean
# stop (preemption.py), a disruption and not a failure.
EXIT_PREEMPTED = 143
