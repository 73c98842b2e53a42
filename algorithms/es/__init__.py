"""OpenAI-style evolution strategies: a master (the learner role) and stateless workers."""
