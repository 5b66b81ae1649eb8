"""Per-kernel jobs on a Ray cluster, their results written into the caller's kernel cache.

``boo preload --ray`` is built on this; the tuner (``boo tune --ray``) is meant to be. Ray
is an optional extra of boo-core (``pip install "boo-core[ray]"``); this package imports it
only when a cluster is asked for.

The API::

    from boo_core.cluster import RayCluster, Task

    def compile_one(context, signature, target):          # module level: runs on a worker
        ...  # compile into BOO's cache as usual (it is context.cache_dir there)
        return something_small                            # comes back as TaskResult.value

    with RayCluster.connect("auto") as cluster:           # None/True/"local": a local instance
        tasks = [Task(key=i, function=compile_one, args=(sig, "cpu"), expect=keys_of(sig))
                 for i, sig in enumerate(signatures)]
        for result in cluster.run(tasks):                 # as each finishes, once per task
            result.key, result.value, result.error, result.written

:class:`RayCluster`
    ``connect(address=None, *, num_cpus=None, runtime_env=None)`` starts a local Ray
    instance (``address`` None, True or ``"local"``), joins the running cluster
    (``"auto"``) or the one at ``"HOST:PORT"`` / ``"ray://HOST:PORT"``, or uses the
    connection this process already has. ``run(tasks, *, cache_dir=None, shared=False,
    retries=3, max_in_flight=None)`` yields one :class:`TaskResult` per task as it
    finishes. ``describe()`` says what the cluster has (``2 nodes, 16 CPUs, 2 GPUs``),
    ``close()`` disconnects (and stops an instance BOO started).

:class:`Task`
    ``key`` (yours, returned in the result), ``function(context, *args)`` and ``args``;
    resources: ``cpus`` (1), ``gpus`` (0; 1 makes a GPU task, which sees its GPU as
    ``cuda:0``), ``resources`` (Ray custom resources, e.g. one naming a GPU model);
    ``seed``: entries of the caller's cache the task needs (a kernel to verify or time),
    copied to it first; ``expect``: the :class:`~boo_core.kernels.cache.CacheKey` s the task
    may write.

:class:`TaskContext`
    What ``function`` gets first: ``cache_dir`` (where it writes), ``caller_cache_dir``,
    ``caller_path(path)`` and ``relocate(text)`` (to report paths as the caller will see
    them), ``node`` and ``host``.

:class:`TaskResult`
    ``key``, ``value``, ``error`` (empty on success), ``written`` and ``kept`` (files of the
    caller's cache), ``node``, ``host``.

The guarantees:

* **Settings travel.** Each task runs under the caller's BOO settings (extra flags, tuning
  spec, timeouts, verification), so workers compute the kernels, and the cache keys, the
  caller would.
* **Results come back.** A task writes into a scratch cache of its own on the worker;
  every file it wrote (kernel, ``meta.json``, ``source.mlir``, ``compile_command.txt``,
  ``failed.json`` and ``compile_log.txt`` for a failure, ``verdicts.json``, tuning
  records) returns with its value, paths in them rewritten to the caller's cache, and
  :func:`~boo_core.cluster.transfer.install` writes them in under each entry's lock:
  through temporary files and renames, ``meta.json`` last, so the entries are those a local
  compile makes (same directory names). ``shared=True`` instead lets tasks write straight
  into ``cache_dir``, when every node mounts it at the same path (checked: a node that does
  not see it fails its tasks with an error saying so).
* **Keys are checked.** With ``expect``, an entry written under any other key (a worker
  with another op version, compiler or CPU) is refused, and the error names the fields of
  the key that differ. Nothing is written for that task.
* **Failures stay per task.** An exception in ``function`` is that task's ``error`` (not
  retried); a worker that dies or a node that leaves makes Ray run the task again, up to
  ``retries`` times, then it is that task's ``error``; a task that none of the nodes alive
  when ``run`` starts could run (a GPU task on a cluster without GPUs) fails at once
  instead of waiting forever.
* **Exactly once.** Each task's result is yielded once and written as it arrives, so
  what finished is on disk whatever happens to the rest; an entry the caller's cache
  already holds intact is kept, not written again. A file outside the entries (a tuning
  record) is replaced whole when its content differs: a file that grows by appends (the
  tuner's progress checkpoints) belongs to the caller, who writes it from the results.

How ``boo tune --ray`` would sit on it: one CPU task per candidate, running what
``tune.candidates.compile_candidate`` runs, ``expect`` the candidate's key; then one GPU task
per kernel (``gpus=1``, ``seed`` its candidates' entries) that verifies and times them and
returns the candidate results; their verdicts come back into ``verdicts.json``, and the
caller checkpoints and writes the tuning record as it does now.
"""

from .ray_cluster import DEFAULT_RETRIES, INSTALL_HINT, RayCluster, RayUnavailable, require_ray
from .tasks import ClusterError, Task, TaskContext, TaskResult
from .transfer import CacheFiles, InstallReport, install, key_mismatch

__all__ = [
    "DEFAULT_RETRIES",
    "INSTALL_HINT",
    "CacheFiles",
    "ClusterError",
    "InstallReport",
    "RayCluster",
    "RayUnavailable",
    "Task",
    "TaskContext",
    "TaskResult",
    "install",
    "key_mismatch",
    "require_ray",
]
