"""Built-in verifiable tasks. `lens.tasks.vartrack` is the synthetic CPU task of the default run."""
