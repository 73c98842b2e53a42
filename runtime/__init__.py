"""The runtime every algorithm runs on (algorithms/api.py is what an algorithm gives it): the
environments' making, the families' actors, learners and replay, the serving loop, learner ranks,
checkpoints, preemption, reconnects, scale, progress and evaluation."""
