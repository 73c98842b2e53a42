"""Learning algorithms (PPO, ES) implementing the learner, actor and evaluator roles."""
