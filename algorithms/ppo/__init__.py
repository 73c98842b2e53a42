"""PPO, SURREAL-style: actors (actor.py) send fragments, the learner (learner.py) trains and
publishes parameters, the evaluator (evaluator.py) reports deterministic returns; serial.py
wires the same cores in one process. Each role module has run_<role>(cfg, ctx) -> int."""
