"""Replay and calibration over a fleet of transcripts: a local process pool or Dask, Parquet out.

- :mod:`dp_compact.fleet.inputs`: session files as local paths or fsspec URLs (``s3://``,
  ``memory://``, ``file://``), listed in the client and fetched on the worker.
- :mod:`dp_compact.fleet.engine`: one function mapped over sessions, on a local process pool
  (the default, no extra dependency) or a ``dask.distributed`` cluster.
- :mod:`dp_compact.fleet.jobs`: the per-session jobs (a replay, a calibration measure) and the
  pooling that turns them into the same reports as one machine gives.
- :mod:`dp_compact.fleet.parquet`: one row per session and policy (replay) or per session
  (calibration), written atomically.
- :mod:`dp_compact.fleet.resample`: a synthetic fleet recombined from real sessions.

Dask, fsspec and pyarrow (the ``dask`` extra) are imported only inside the functions that need
them: ``import dp_compact.fleet`` loads none of them.
"""

from __future__ import annotations
