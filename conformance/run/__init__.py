"""Running cases on engines: the executor (one case, step by step), what counts as a refusal,
observations compared with expectations, repro scripts, and the engine handle (in this process
or in worker processes that send plain data back)."""
