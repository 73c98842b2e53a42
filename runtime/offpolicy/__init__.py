"""The off-policy runtime: replay shards with a rate limiter, actors that insert into them, a learner
that samples them (api.OffPolicy; SAC: algorithms/sac)."""
