"""The orchestrator: an experiment's spec becomes a program of components, run on one backend.

The core, used by every backend and importing none:
- `components`, `program`: the program as data (`make_program(spec)`: roles, argv, env, resources);
- `launcher`: the `Launcher` interface and its errors;
- `policy`: the failure policy (what an exit of each role means), `status`: the status contract;
- `home`, `home_launcher`, `files`: experiments that live on this machine (`$SURREAL_HOME`);
- `plot`: learning curves from TensorBoard events;
- `trained`: a run's policy from its checkpoint (`surreal.load_policy`) and `surreal record`.

One subpackage per backend: `local` (supervised processes), `containers` (the Kubernetes objects as
podman or Docker containers; it reuses kube's rendering), `kube` (render and apply the objects; the
only one that imports `kubernetes`). `backends` sits above them all and opens the one `--backend`
names.
"""
