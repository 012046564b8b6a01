"""The host's share of a training step, spread over the host's cores.

A fine-tuning step waits on the CPU for two things the device does not do: the superpixels
rebuilt from the detached boundary maps (``boundary_watershed``: watershed, RAG, targets,
frontier pixels) and the trees of the detached edge weights (average linkage, the lcas of
the edges, with the triplets the leaf-lca tables). Both are per image, so they spread over
processes: one job per image, and the batch assembled from the jobs' arrays.

Why processes: higra's ``binary_partition_tree_average_linkage`` and ``lowest_common_ancestor``
hold the GIL for the whole call (``benchmarks/results/training.md``, "Host pool": a Python
thread waits the call's full length), so threads cannot build trees side by side; the
watershed and the RAG release it, but the rest of the rebuild (targets, packing) is Python.

:class:`HostPool` is a persistent :class:`~concurrent.futures.ProcessPoolExecutor` (started
on first use, kept for the process, one per worker count: :func:`host_pool`), with the
``forkserver`` start method where the platform has it (``spawn`` elsewhere): a worker is
never a fork of a process that already runs CUDA or torch's threads. Workers ignore
SIGINT (the main process handles Ctrl-C and shuts them down) and end when the main process
ends, on any signal, ``kill -9`` included (:mod:`hiseg._lifetime`). As with any such pool, a worker
imports the main script: a script that trains must guard its entry point (``if __name__ ==
"__main__":``; ``train.py`` and the ``hiseg`` commands do). A pool whose worker dies (killed, out
of memory, an unguarded script) is given up for the process, with a warning: the work goes on in
process.

The results do not depend on where the jobs ran: in process (``host_workers=0``, or a batch
below :data:`MIN_POOL_EDGES`) the same per-image functions run one after the other, so the
trees' index arrays are bitwise the pool's (``tests/segmentation/test_hostpool.py``).

The batched tree (:func:`average_linkage_batch`) is laid out per image: image ``b``'s
internal nodes are consecutive (after those of images ``0..b-1``), and ``B - 1`` virtual
nodes chain the image roots at the top (``V_j`` joins images ``0..j`` with image ``j + 1``;
its representative edge is the virtual edge ``E + j``, as in
:func:`hiseg.core.average_linkage.build_average_linkage_hierarchy`'s batches). It is therefore the
per-image trees exactly, ties included; its ultrametric equals the one-call batched tree's.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Optional

import numpy as np

from .._lifetime import process_pool
from ..core.graph import BatchedGraph, EdgeList
from ..core.average_linkage import AverageLinkageHierarchy, average_linkage, checked_average_input
from ..core.lca import LeafLCA
from ..core.ultrametric import disconnected_message

__all__ = ["HostPool", "host_pool", "resolve_workers", "available_cores", "average_linkage_batch",
           "thread_pool", "MIN_POOL_EDGES", "MIN_POOL_PIXELS"]

#: A batch with fewer RAG edges than this builds its trees in process: below it the pool's
#: dispatch (pickling, two pipe trips per image) costs more than the trees it spreads
#: (``benchmarks/bench_training.py``, "Crossover", 2-core machine: the pool 0.73x at 1,984 and
#: 3,877 edges, 1.87x at 7,757; ``benchmarks/results/training.md``).
MIN_POOL_EDGES = 5000
#: A batch of fewer pixels rebuilds its superpixels in process on the thread pool
#: (``hiseg.data.graphs.rebuild_graphs``): on the 2-core machine the pool was 0.55x for one
#: 320x320 image, 0.85-0.99x from four (the thread pool already overlaps the GIL-free watershed).
MIN_POOL_PIXELS = 400_000


def available_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where the
    platform lacks it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def resolve_workers(host_workers=None) -> int:
    """The number of worker processes of a ``host_workers`` setting: ``None`` or ``"auto"``:
    the cores this process may use (:func:`available_cores`) divided among the processes of
    a multi-process run on this host (``LOCAL_WORLD_SIZE``), 0 where that leaves fewer than
    2; an integer >= 0 as given (0: in process). ValueError for anything else."""
    if host_workers is None or host_workers == "auto":
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        n = available_cores() // local
        return n if n >= 2 else 0
    if isinstance(host_workers, bool) or not isinstance(host_workers, (int, np.integer)) or host_workers < 0:
        raise ValueError(f"host_workers must be an integer >= 0 (0: in process) or 'auto', got {host_workers!r}")
    return int(host_workers)


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass


def _context():
    import multiprocessing as mp

    if sys.platform.startswith("linux") and "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])  # numpy, higra, torch imported once, in the server
        return ctx
    return mp.get_context("spawn")


class HostPool:
    """A persistent pool of ``workers`` processes for per-image host work.

    The processes start on the first :meth:`submit` (about a second: the fork server imports
    numpy, higra and torch once) and stay until :meth:`close` or the end of the process. A pool
    whose worker died is given up (:attr:`disabled`: the callers then work in process).
    """

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"a HostPool needs at least one worker, got {workers}")
        self.workers = int(workers)
        self._executor: Optional[ProcessPoolExecutor] = None
        self._lock = threading.Lock()
        self.disabled = False

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = process_pool(self.workers, mp_context=_context(), initializer=_init_worker)
            return self._executor

    def submit(self, fn, *args):
        """``fn(*args)`` in a worker (a :class:`~concurrent.futures.Future`); ``fn`` must be a
        module-level function and the arguments picklable."""
        return self._pool().submit(fn, *args)

    def map(self, fn, *iterables) -> list:
        """``[fn(*a) for a in zip(*iterables)]`` computed by the workers (in process once the pool
        is :attr:`disabled`), in order."""
        jobs = list(zip(*iterables))
        out = [None] * len(jobs)
        _run_jobs(fn, jobs, self, out.__setitem__)
        return out

    def broken(self) -> None:
        """Give up a pool whose worker died: its processes stop, :attr:`disabled` is set."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
            self.disabled = True

    def close(self) -> None:
        """Stop the workers (waits for running jobs)."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __repr__(self) -> str:
        return f"HostPool(workers={self.workers}, started={self._executor is not None}, disabled={self.disabled})"


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def host_pool(host_workers=None) -> Optional[HostPool]:
    """The process-wide :class:`HostPool` of a ``host_workers`` setting (:func:`resolve_workers`),
    or None for in process (0 workers). The same object for the same count, for the process's
    life; it starts its processes only when a job is submitted."""
    n = resolve_workers(host_workers)
    if n == 0:
        return None
    with _POOLS_LOCK:
        if n not in _POOLS:
            _POOLS[n] = HostPool(n)
        return _POOLS[n]


_THREADS = None


def thread_pool() -> ThreadPoolExecutor:
    """One process-wide thread pool (a thread per core this process may run on, at most 16):
    the in-process rebuild's, whose watershed and RAG release the GIL."""
    global _THREADS
    with _POOLS_LOCK:
        if _THREADS is None:
            _THREADS = ThreadPoolExecutor(max_workers=min(16, available_cores()), thread_name_prefix="hiseg-rebuild")
        return _THREADS


# ----------------------------------------------------------------------------- trees
def average_linkage_job(sources: np.ndarray, targets: np.ndarray, num_vertices: int, weights: np.ndarray,
                        lengths: Optional[np.ndarray], lca: bool = False):
    """What a worker sends back of one graph's average-linkage tree
    (:func:`hiseg.core.average_linkage.build_average_linkage_hierarchy`, local ids, not checked): the
    int64 arrays ``parents``, ``mst_edge_map`` and ``edge_lca``, with ``lca`` also the leaves'
    depth-first ranks and the split nodes between consecutive leaves (the level 0 of the leaf-lca
    table). ValueError for a disconnected graph."""
    h = average_linkage(EdgeList(sources, targets, int(num_vertices)), weights, lengths)
    if not lca or h.num_leaves < 2:
        return h.parents, h.mst_edge_map, h.edge_lca, np.zeros(h.num_leaves, np.int64), np.zeros(0, np.int64)
    order = LeafLCA(h.tree, h.parents, h.num_leaves, h.sizes, h.children(), transient=True)
    return h.parents, h.mst_edge_map, h.edge_lca, np.asarray(order.rank, np.int64), order.table[0].astype(np.int64)


def _run_jobs(fn, jobs: list, pool: Optional[HostPool], place) -> None:
    """``place(i, fn(*jobs[i]))`` for every job: in process, or submitted to ``pool`` and placed
    as they complete (the main process assembles while the workers compute). A pool whose
    worker died is given up (:meth:`HostPool.broken`) and the jobs run in process, with a warning."""
    if pool is None or pool.disabled:
        for i, job in enumerate(jobs):
            place(i, fn(*job))
        return
    try:
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for f in as_completed(futures):
            place(futures[f], f.result())
    except BrokenProcessPool:
        pool.broken()
        warnings.warn("hiseg's host pool lost a worker (killed, out of memory, or a script that trains without "
                      "'if __name__ == \"__main__\":'): the host work runs in process from now on", RuntimeWarning,
                      stacklevel=3)
        _run_jobs(fn, jobs, None, place)


def average_linkage_batch(graph: BatchedGraph, weights, lengths=None, pool: Optional[HostPool] = None, *,
                          lca: bool = False, check: bool = True) -> AverageLinkageHierarchy:
    """The average-linkage hierarchy of a batch of graphs, one tree per graph, built in ``pool``
    (or in process: ``pool`` None, or fewer than :data:`MIN_POOL_EDGES` edges) and laid out per
    graph (the module docstring).

    Parameters
    ----------
    graph : :class:`~hiseg.core.graph.BatchedGraph`
    weights : (E,) float array or tensor (read on the host; a tensor is copied there)
    lengths : (E,) positive array, optional: the frontier lengths (all ones when omitted)
    pool : :class:`HostPool` or None
    lca : also make the leaf-lca tables (what :meth:`Hierarchy.lca`, :func:`hiseg.core.device.leaf_lca`
        and ``upload_indices(lca=True)`` read): the workers order each graph's leaves, this
        process chains the orders graph after graph and fills the sparse table (O(N log N)).
    check : validate the graph, weights and lengths (O(E))

    Returns
    -------
    :class:`~hiseg.core.average_linkage.AverageLinkageHierarchy` with ``batch=graph``: per graph, its
    nodes are those of ``build_average_linkage_hierarchy(graph.graph(b), ...)`` shifted; the
    ultrametric equals that of ``build_average_linkage_hierarchy(graph, ...)``.

    Cost: the trees (higra, O(E_b log E_b) each, superlinear in practice: one call on a whole batch
    is slower than the per-graph calls, ``benchmarks/results/training.md``) spread over the pool's workers, plus O(N + E)
    in this process (pickling the graphs and weights, placing the arrays). Raises as
    :func:`~hiseg.core.average_linkage.build_average_linkage_hierarchy` (a disconnected graph names its
    index in the batch).
    """
    el, w, ln, _ = checked_average_input(graph, weights, lengths, check)
    E, N, B = el.num_edges, el.num_vertices, graph.num_graphs
    vptr, eptr = np.asarray(graph.vertex_ptr, np.int64), np.asarray(graph.edge_ptr, np.int64)
    jobs = [(el.sources[eptr[b]:eptr[b + 1]] - vptr[b], el.targets[eptr[b]:eptr[b + 1]] - vptr[b],
             int(vptr[b + 1] - vptr[b]), w[eptr[b]:eptr[b + 1]], None if ln is None else ln[eptr[b]:eptr[b + 1]], lca)
            for b in range(B)]
    parents = np.empty(2 * N - 1, np.int64)
    mst = np.empty(N - 1, np.int64)
    edge_lca = np.empty(E, np.int64)
    roots = np.empty(B, np.int64)
    rank = np.empty(N, np.int64) if lca else None
    split = np.empty(N - 1, np.int32 if 2 * N < 2**31 else np.int64) if lca else None
    virt = np.arange(2 * N - B, 2 * N - 1)  # virtual node V_j = 2N - B + j joins graphs 0..j with graph j + 1

    def place(b: int, tree) -> None:
        p, m, e_lca, r, s = tree
        n, v0 = int(vptr[b + 1] - vptr[b]), int(vptr[b])
        shift = N - b - n + v0  # internal node k of graph b (local id n + k) is N + v0 - b + k
        gp = np.where(p < n, p + v0, p + shift)  # leaves keep their vertex id
        parents[v0:v0 + n] = gp[:n]
        parents[v0 + N - b:v0 + N - b + n - 1] = gp[n:]
        roots[b] = v0 if n == 1 else 2 * n - 2 + shift
        mst[v0 - b:v0 - b + n - 1] = m + eptr[b]
        edge_lca[eptr[b]:eptr[b + 1]] = e_lca + shift
        if lca:  # leaves in graph order, each graph's in its own depth-first order; V_b between graphs b, b + 1
            rank[v0:v0 + n] = r + v0
            split[v0:v0 + n - 1] = s + shift
            if b < B - 1:
                split[v0 + n - 1] = virt[b]

    try:
        _run_jobs(average_linkage_job, jobs, pool if E >= MIN_POOL_EDGES else None, place)
    except ValueError as e:
        if "not connected" in str(e):
            raise ValueError(disconnected_message(el, graph)) from None
        raise
    if B > 1:
        parents[roots[0]] = virt[0]
        parents[roots[1:]] = virt
        parents[virt] = np.append(virt[1:], virt[-1])
        mst[virt - N] = E + np.arange(B - 1)
    h = AverageLinkageHierarchy(el, parents, mst, edge_lca, ln, graph)
    if lca:
        h.set_leaf_lcas(LeafLCA.from_split_nodes(rank, split))
    return h
