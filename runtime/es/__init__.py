"""Evolution strategies' master, workers and maths (the ES algorithm: algorithms/es)."""
