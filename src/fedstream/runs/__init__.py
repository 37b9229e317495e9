"""The run folder every task, sweep and experiment writes (``--out DIR``).

``files`` (atomic writes: a crash leaves the old file or the new one, never half of one),
``checkpoint`` (checkpoints with a sha256 of their content, checked on load), ``folder``
(:class:`RunFolder`: config.yaml, metrics.csv rows appended as produced, summary.json and a lock
naming the process that writes the folder), ``state`` (flat state dicts), ``threads``.
"""
