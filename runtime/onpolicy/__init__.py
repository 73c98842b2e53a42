"""The on-policy runtime: actors that sample from the policy network and send fragments (actor.py,
fragment.py, frames.py), the learner that checks them, computes GAE and calls an algorithm's update
(learner.py, batch.py, gae.py), the actor-critic networks (networks.py, cnn.py, policy.py), the
evaluator's policy (evaluator.py), and the serial harness (serial.py). PPO and A2C are written on it
(api.OnPolicy)."""
