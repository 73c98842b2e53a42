"""Environments as the algorithms see them, apart from the runtime: which one a spec names and how
to build it (ref.py), making, probing and stepping a batch of them and their spaces (make.py),
observations and actions that are not one Box (obs_leaves.py, act_leaves.py), Atari's
preprocessing (atari.py)."""
