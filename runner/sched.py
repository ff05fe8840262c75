"""The graph scheduler: splits a forward graph across backends, allocates its compute memory and
runs it (in the manner of ggml_backend_sched).

Between the graph builder (runner/arch/) and the backends: device slots (CANN0..N-1 through
runner/backend.py) and the CPU reference (runner/reference.py, numpy on host arrays) as the
fallback for nodes no device runs. plan() assigns nodes to backends in numbered passes, cuts the
graph into splits, adds input copies between backends and places every compute tensor in one
compute buffer per device, reusing memory by liveness. Plan.run() uploads inputs, computes the
splits in order and reads the outputs. Shapes are ggml order unless noted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from . import backend as be
from . import profiler
from . import reference as ref
from .backend import Op

_VIEW_OPS = ref.VIEW_OPS


class SchedError(RuntimeError):
    """A graph that cannot be scheduled or run (the message names the node and backend)."""


# ---- backends the scheduler knows ---------------------------------------------------------------

class DeviceSlot:
    """A device backend: its stream, buffer types and supports_op. `decline` lists ops to refuse
    (tests of the CPU fallback)."""

    is_cpu = False

    def __init__(self, device: be.Device, decline=()):
        self.device = device
        self.name = device.name
        self.backend = device.init_backend()
        self.buffer_type = device.buffer_type
        self.decline = set(decline)

    def supports(self, node: be.Tensor) -> bool:
        if node.op in self.decline:
            return False
        return self.device.supports_op(node)

    def supports_graph(self, graph: be.Graph, ops: list) -> list:
        """supports() of each of graph's nodes (ops: theirs, in node order), in one C call."""
        ok = self.device.supports_graph(graph)
        decline = self.decline
        return [bool(k) and op not in decline for k, op in zip(ok, ops)] if decline \
            else [bool(k) for k in ok]

    def close(self):
        self.backend.close()


class CPUSlot:
    """The CPU reference: every op the numpy reference knows, on host arrays."""

    is_cpu = True
    name = "CPU"
    buffer_type = None

    def supports(self, node: be.Tensor) -> bool:
        if node.op in _VIEW_OPS or node.op == Op.NONE:
            return True
        return ref.supports(node)   # the reference's dispatch table is the one list

    def close(self):
        pass


def _root(t: be.Tensor) -> be.Tensor:
    return t.storage


def _raw(root: be.Tensor) -> np.ndarray:
    """A root tensor's bytes (ggml layout, synchronous read)."""
    return root.read_bytes(0, root.nbytes)


def _is_weights(t: be.Tensor) -> bool:
    return t.buffer_usage == be.BufferUsage.WEIGHTS


# ---- the allocator ------------------------------------------------------------------------------

class _Arena:
    """Offsets in one compute buffer: best-fit over free blocks, else grow the end (ggml-alloc's
    dynamic allocator without the in-place reuse)."""

    def __init__(self, alignment: int):
        self.alignment = max(alignment, 1)
        self.free: list[list[int]] = []      # [offset, size], sorted by offset
        self.end = 0

    def alloc(self, size: int) -> int:
        size = (size + self.alignment - 1) // self.alignment * self.alignment
        best = None
        for i, (_, s) in enumerate(self.free):
            if s >= size and (best is None or s < self.free[best][1]):
                best = i
        if best is not None:
            off, s = self.free[best]
            if s == size:
                del self.free[best]
            else:
                self.free[best] = [off + size, s - size]
            return off
        if self.free and self.free[-1][0] + self.free[-1][1] == self.end:
            off = self.free.pop()[0]
        else:
            off = self.end
        self.end = off + size
        return off

    def release(self, off: int, size: int) -> None:
        size = (size + self.alignment - 1) // self.alignment * self.alignment
        blocks = self.free
        i = 0
        while i < len(blocks) and blocks[i][0] < off:
            i += 1
        blocks.insert(i, [off, size])
        if i + 1 < len(blocks) and blocks[i][0] + blocks[i][1] == blocks[i + 1][0]:
            blocks[i][1] += blocks[i + 1][1]
            del blocks[i + 1]
        if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == blocks[i][0]:
            blocks[i - 1][1] += blocks[i][1]
            del blocks[i]


# ---- plans --------------------------------------------------------------------------------------

@dataclass
class Split:
    slot: int                                  # index into Scheduler.slots
    nodes: list                                # compute nodes (Tensor), in graph order
    first: int                                 # index of the first node in the graph order
    graph: be.Graph | None = None              # device splits
    copies: list = field(default_factory=list)  # (src root, src slot, dst tensor) before compute


class Scheduler:
    """Backends in priority order (devices first); the CPU reference is always the last slot."""

    def __init__(self, slots: list):
        self.slots = [s for s in slots if not s.is_cpu] + [CPUSlot()]
        self.cpu = len(self.slots) - 1
        self._by_buft = {}
        for i, s in enumerate(self.slots[:-1]):
            self._by_buft[s.buffer_type.id] = i
        self.buffers: dict[int, be.Buffer] = {}     # slot -> compute buffer
        self.generation = 0                         # bumped when a compute buffer is replaced
        self.weight_cache: dict[int, np.ndarray] = {}  # CPU: bytes of weights read once

    def slot_of_buft(self, buft: int | None) -> int | None:
        """The slot whose memory a buffer type (BufferType.id; None or 0: not placed) is."""
        if not buft:
            return None
        slot = self._by_buft.get(buft)
        if slot is None:    # another buffer type of a device (its mapped host memory), or none
            slot = self._by_buft[buft] = next(
                (i for i, s in enumerate(self.slots[:-1])
                 if s.device.supports_buft(be.BufferType.from_id(buft))), self.cpu)
        return slot

    def reserve(self, slot: int, size: int) -> None:
        """Grow slot's compute buffer to `size` bytes (plans placed in the old one become stale)."""
        old = self.buffers.get(slot)
        if old is not None and old.size >= size:
            return
        s = self.slots[slot]
        if old is not None:
            old.close()
            self.generation += 1
        try:
            buf = s.buffer_type.alloc_buffer(max(size, 1))
        except be.CannError as exc:
            raise MemoryError(f"cannot allocate a {size / 2**20:.1f} MiB compute buffer on "
                              f"{s.name}: {exc}; use a smaller batch (-b) or context (-c)") \
                from None
        buf.usage = be.BufferUsage.COMPUTE
        self.buffers[slot] = buf

    def plan(self, graph: be.Graph, inputs: dict, outputs: dict, split_each_node=False) -> "Plan":
        return Plan(self, graph, inputs, outputs, split_each_node)

    def reserve_for(self, graph: be.Graph, inputs: dict, outputs: dict) -> dict:
        """Grow the compute buffers to what a plan of `graph` needs (MemoryError when they cannot
        be allocated), without placing its tensors or building its split graphs: the worst case
        a model reserves at load, never run. -> slot -> bytes."""
        return Plan(self, graph, inputs, outputs, False, reserve_only=True).compute_sizes

    def close(self):
        for b in self.buffers.values():
            b.close()
        self.buffers.clear()
        for s in self.slots:
            s.close()


_C_ARRAYS = {np.dtype(np.float32): "float[]", np.dtype(np.int32): "int32_t[]"}


class Plan:
    """One graph split, allocated and ready to run many times (decode reuses it per token)."""

    def __init__(self, sched: Scheduler, graph: be.Graph, inputs: dict, outputs: dict,
                 split_each_node: bool, reserve_only: bool = False):
        self.sched, self.graph = sched, graph
        self.inputs = dict(inputs)           # name -> leaf Tensor (values given at run())
        self.outputs = dict(outputs)         # name -> Tensor to read after run()
        self.generation = sched.generation
        self._reads = None                   # _output_reads()
        self._device_steps = None            # _device_only()
        self._kept = None                    # run_kept()'s outputs
        self._kept_reads: dict = {}          # run_kept(names=): names -> its reads
        self.ctx = be.Context(max_tensors=4096)
        self._read_nodes()
        self._assign()
        self._split(split_each_node)
        self._liveness()
        self._wire()
        self._allocate(reserve_only)
        if not reserve_only:
            self._build_split_graphs()

    # ---- pass 0: what the passes read of each node, read once (each read crosses cffi) ----------
    def _read_nodes(self):
        """Per node, from one clm_graph_scan: op, whether it is a view, whether it has memory,
        its root (memory owner) and the root's buffer type, and its sources as (source, root,
        root's buffer type, root's buffer usage + 1) addresses as they are before _wire rewires
        them (0: none). Tensor objects are made only where a pass needs one (_tensor)."""
        graph = self.graph
        words, sources = graph.scan()
        W = be.SCAN_WORDS
        self.nodes = graph.nodes
        self.node_addrs = words[be.SCAN_NODE::W]
        self.index = {a: i for i, a in enumerate(self.node_addrs)}
        self.ops = words[be.SCAN_OP::W]
        self.flags = words[be.SCAN_FLAGS::W]
        self.views = [bool(f & be.SCAN_VIEW) for f in self.flags]
        self.root_addrs = words[be.SCAN_ROOT::W]
        self.root_bufts = words[be.SCAN_ROOT_BUFT::W]
        self.srcs = []
        at = 0
        for n in words[be.SCAN_N_SRC::W]:
            self.srcs.append(sources[at:at + n])
            at += n
        self._tensors = dict(zip(self.node_addrs, self.nodes))   # address -> Tensor
        self._supports: dict = {}          # slot -> per node supports (devices: one C call)

    def _tensor(self, addr: int) -> be.Tensor:
        t = self._tensors.get(addr)
        if t is None:
            t = self._tensors[addr] = self.graph._ctx.tensor_at(addr)
        return t

    def _supported(self, slot: int, i: int) -> bool:
        per_node = self._supports.get(slot)
        if per_node is None:
            s = self.sched.slots[slot]
            if s.is_cpu:       # the reference: asked node by node (rarely)
                per_node = self._supports[slot] = {}
            else:
                per_node = self._supports[slot] = s.supports_graph(self.graph, self.ops)
        if isinstance(per_node, dict):
            ok = per_node.get(i)
            if ok is None:
                ok = per_node[i] = self.sched.slots[slot].supports(self.nodes[i])
            return ok
        return per_node[i]

    # ---- pass 1-4: assign a backend to every node ----------------------------------------------
    def _assign(self):
        sched = self.sched
        nodes, ops, supported = self.nodes, self.ops, self._supported
        views, root_addrs, index = self.views, self.root_addrs, self.index
        slot_of_buft = sched.slot_of_buft
        n_nodes = len(nodes)
        assign: list = [None] * n_nodes
        self.leaf_slot = {}                  # root address -> slot (pre-allocated leaves)
        weights = int(be.BufferUsage.WEIGHTS) + 1

        # pass 1: nodes on pre-allocated tensors: writes into them (SET_ROWS, CPY) and views of
        # them go where the memory is; ops with a weight operand go to the weight's device
        for i in range(n_nodes):
            if views[i] and root_addrs[i] not in index:
                s = slot_of_buft(self.root_bufts[i])
                if s is not None:
                    assign[i] = s
                    continue
            for src, _, buft, usage in self.srcs[i]:
                if src and usage == weights:
                    s = slot_of_buft(buft)
                    if s is not None and supported(s, i):
                        assign[i] = s
                        break
        # pass 2: expand device assignments down the graph, then up (runs of unassigned nodes
        # join their neighbour's backend when it supports them)
        cpu = sched.cpu
        cur = None
        for i in range(n_nodes):
            if assign[i] is not None:
                cur = assign[i] if assign[i] != cpu else None
            elif cur is not None and supported(cur, i):
                assign[i] = cur
        cur = None
        for i in range(n_nodes - 1, -1, -1):
            if assign[i] is not None:
                cur = assign[i] if assign[i] != cpu else None
            elif cur is not None and supported(cur, i):
                assign[i] = cur
        # pass 3: what is left goes to the first backend that supports it
        for i in range(n_nodes):
            if assign[i] is None:
                assign[i] = next((k for k in range(len(sched.slots)) if supported(k, i)), None)
                if assign[i] is None:
                    n = nodes[i]
                    raise SchedError(f"no backend runs node {n.name!r} ({n.op_desc})")
        # pass 4: view nodes follow their source; unsupported assignments fall back to the CPU
        for i in range(n_nodes):
            if ops[i] in _VIEW_OPS:
                j = index.get(root_addrs[i])
                if j is not None:
                    assign[i] = assign[j]
                else:
                    s = slot_of_buft(self.root_bufts[i])
                    assign[i] = s if s is not None else assign[i]
            elif not supported(assign[i], i):
                assign[i] = cpu
        self.assign = assign

    # ---- pass 5: splits -------------------------------------------------------------------------
    def _split(self, each_node: bool):
        splits: list[Split] = []
        self._split_index: list[list[int]] = []     # per split: its nodes' graph indices
        ops, assign, nodes = self.ops, self.assign, self.nodes
        for i in range(len(nodes)):
            if ops[i] in _VIEW_OPS:
                continue
            s = assign[i]
            if each_node or not splits or splits[-1].slot != s:
                splits.append(Split(slot=s, nodes=[], first=i))
                self._split_index.append([])
            splits[-1].nodes.append(nodes[i])
            self._split_index[-1].append(i)
        self.splits = splits
        self.split_of = {}
        addrs = self.node_addrs
        for k, idx in enumerate(self._split_index):
            for i in idx:
                self.split_of[addrs[i]] = k

    def _liveness(self):
        """Last use (graph index) of every root, through views and across backends, and of every
        root on each backend (how long a copy there must live); before any rewiring."""
        self.last, self.last_on = {}, {}
        last, last_on = self.last, self.last_on
        ops, assign = self.ops, self.assign
        for i, entries in enumerate(self.srcs):
            if ops[i] in _VIEW_OPS:
                continue
            s = assign[i]
            for src, r, _, _ in entries:
                if src:     # nodes come in order: i is the latest use so far
                    last[r] = i
                    last_on[(r, s)] = i

    # ---- pass 6: inputs of each split from other backends (copies) and earlier splits (aliases) --
    def _wire(self):
        sched = self.sched
        self.copies: dict = {}      # (root address, slot) -> copy Tensor on slot
        self.aliases: list = []     # (alias Tensor, source view/root Tensor, base Tensor)
        self.input_targets: dict = {name: [] for name in self.inputs}   # name -> [(slot, t)]
        self.alloc_extra: list = []  # (slot, tensor, alloc step, root address) copies to place
        input_addr = {t.address: name for name, t in self.inputs.items()}
        self._input_addrs = set(input_addr)
        alias_of: dict = {}
        split_of, srcs, tensor = self.split_of, self.srcs, self._tensor
        # a result another split reads, or the caller reads, is an output of its split's graph
        # (ggml_set_output): a backend that fuses nodes must still write it (CANN_LLM_FUSION)
        for t in self.outputs.values():
            t.mark_output()
        for k, idx in enumerate(self._split_index):
            for i in idx:
                for src, root_addr, _, _ in srcs[i]:
                    if src and split_of.get(root_addr, k) != k:
                        tensor(root_addr).mark_output()
        for k, sp in enumerate(self.splits):
            if sched.slots[sp.slot].is_cpu:
                continue
            for i in self._split_index[k]:
                n = None
                for si, (src_addr, root_addr, root_buft, _) in enumerate(srcs[i]):
                    if not src_addr:
                        continue
                    where = split_of.get(root_addr)
                    if where == k:
                        continue                       # computed in this split
                    if where is None and root_addr not in input_addr:
                        s = sched.slot_of_buft(root_buft)
                        if s == sp.slot:
                            continue                   # pre-allocated here (weights, KV)
                        if s is None:
                            raise SchedError(f"node {self.nodes[i].name!r} "
                                             f"({self.nodes[i].op_desc}) reads "
                                             f"{tensor(root_addr).name!r}, which has no memory")
                    root = tensor(root_addr)
                    if where is not None and self.splits[where].slot == sp.slot:
                        base = root                    # same backend, earlier split: alias
                    else:
                        key = (root_addr, sp.slot)
                        if key not in self.copies:
                            copy = self.ctx.new_tensor(root.type, root.ne,
                                                       name=f"{root.name}#{sp.slot}"[:63])
                            self.copies[key] = copy
                            if root_addr in input_addr:
                                self.input_targets[input_addr[root_addr]].append(
                                    (sp.slot, copy))
                                self.alloc_extra.append((sp.slot, copy, -1, root_addr))
                            else:
                                src_slot = (self.assign[self.index[root_addr]]
                                            if root_addr in self.index
                                            else sched.slot_of_buft(root_buft))
                                sp.copies.append((root, src_slot, copy))
                                self.alloc_extra.append((sp.slot, copy, sp.first, root_addr))
                        base = self.copies[key]
                    base_addr = base.address
                    akey = (src_addr, base_addr)
                    if akey not in alias_of:
                        if src_addr == root_addr and base_addr != root_addr:
                            alias_of[akey] = base      # the copy itself stands for the root
                        else:
                            src = tensor(src_addr)
                            alias = self.ctx.new_tensor(src.type, src.ne)
                            alias.name = src.name[:60] + "#a"
                            alias.set_strides(src.nb)
                            self.aliases.append((alias, src, root, base))
                            alias_of[akey] = alias
                    if n is None:
                        n = self.nodes[i]
                    n.set_src(si, alias_of[akey])
        # CPU inputs are written straight into its memory; note which inputs the CPU reads
        self.cpu_inputs = set()
        for k, sp in enumerate(self.splits):
            if sched.slots[sp.slot].is_cpu:
                for i in self._split_index[k]:
                    for src, root_addr, _, _ in srcs[i]:
                        if src and root_addr in input_addr:
                            self.cpu_inputs.add(input_addr[root_addr])

    # ---- pass 7: compute memory by liveness -----------------------------------------------------
    def _allocate(self, reserve_only: bool = False):
        sched, nodes = self.sched, self.nodes
        keep = {t.address for t in self.outputs.values()} | {_root(t).address
                                                            for t in self.outputs.values()}
        last, slots, ops, flags = self.last, sched.slots, self.ops, self.flags
        placed = be.SCAN_VIEW | be.SCAN_HAS_DATA
        events = []       # (time, kind 0 = alloc / 1 = free, slot, tensor, address)
        for i, addr in enumerate(self.node_addrs):
            s = self.assign[i]
            if slots[s].is_cpu or ops[i] in _VIEW_OPS or flags[i] & placed:
                continue
            events.append((4 * i, 0, s, nodes[i], addr))   # not a view: its own address
            if addr not in keep:
                events.append((4 * max(last.get(addr, i), i) + 1, 1, s, nodes[i], addr))
        # copies live from their split's start to their last consumer on that backend
        for slot, copy, first, root_addr in self.alloc_extra:
            addr = copy.address
            if first < 0:
                events.append((-2, 0, slot, copy, addr))      # inputs: whole graph
            else:
                events.append((4 * first - 2, 0, slot, copy, addr))
                events.append((4 * self.last_on.get((root_addr, slot), len(nodes)) + 1, 1,
                               slot, copy, addr))
        events.sort(key=lambda e: (e[0], e[1]))
        sizes: dict = {}        # address -> bytes, asked per buffer type in one go
        for slot in {e[2] for e in events}:
            allocs = [(e[4], e[3]) for e in events if e[2] == slot and e[1] == 0]
            sizes.update(zip((a for a, _ in allocs),
                             slots[slot].buffer_type.alloc_sizes(t for _, t in allocs)))
        arenas: dict[int, _Arena] = {}
        offsets: dict[int, tuple] = {}    # address -> (slot, offset, tensor, size)
        for _, kind, slot, t, addr in events:
            arena = arenas.get(slot)
            if arena is None:
                arena = arenas[slot] = _Arena(slots[slot].buffer_type.alignment)
            if kind == 0:
                size = sizes[addr]
                offsets[addr] = (slot, arena.alloc(size), t, size)
            else:
                arena.release(offsets[addr][1], offsets[addr][3])
        self.compute_sizes = {slot: a.end for slot, a in arenas.items()}
        for slot, size in self.compute_sizes.items():
            sched.reserve(slot, size)
        self.generation = sched.generation
        if reserve_only:
            return
        for slot, off, t, _ in offsets.values():
            t.alloc(sched.buffers[slot], off)
        # views of allocated memory get their addresses (ggml_backend_view_init)
        for i, f in enumerate(flags):
            if f & be.SCAN_VIEW and not f & be.SCAN_HAS_DATA and (
                    f & be.SCAN_ROOT_HAS_DATA or self.root_addrs[i] in offsets):
                nodes[i].view_init()
        for alias, src, root, base in self.aliases:
            if base.address == root.address:
                addr, like = src.data, src
            else:
                addr, like = base.data + src.view_offs, base
            if addr == 0:
                raise SchedError(f"{src.name!r} has no memory to alias")
            alias.alias_storage(addr, like)

    def _build_split_graphs(self):
        for sp in self.splits:
            if self.sched.slots[sp.slot].is_cpu:
                continue
            g = self.ctx.new_graph(max_nodes=2 * len(self.nodes) + 64)
            for n in sp.nodes:
                g.build_forward(n)
            sp.graph = g

    # ---- running ---------------------------------------------------------------------------------
    def run(self, values: dict, eval_callback=None, read_outputs: bool = True) -> dict | None:
        """Upload the inputs (name -> numpy array, numpy order), compute every split, return the
        outputs (name -> numpy array); read_outputs=False computes without reading them back
        ({}: a tensor-parallel rank whose results rank 0 returns). With eval_callback(name, op,
        type, ne, data), each computed
        node is shown to it (plan with split_each_node=True to see every node); a False return
        stops the run and run() returns None. A callback taking a sixth positional argument also
        gets an EvalNode (source names and values, write-back)."""
        prof = profiler.active()
        if prof is None and eval_callback is None and read_outputs:
            steps = self._device_steps
            if steps is None:
                steps = self._device_steps = self._device_only()
            if steps:
                return self._run_device(values, *steps)
        sched, slots = self.sched, self.sched.slots
        span = _no_span if prof is None else prof.span
        launches: dict = {}                 # device slot -> host times of its graph launches (us)
        mem = ref.Memory() if self._uses_memory() else None
        with span("upload inputs"):
            for backend, targets in self._uploads():
                backend.set_tensors_async([(t, values[name]) for name, t in targets])
            for name in self.cpu_inputs:
                t = self.inputs[name]
                mem.raw[t.address] = np.ascontiguousarray(values[name]).reshape(-1) \
                    .view(np.uint8).copy()
        for k, sp in enumerate(self.splits):
            slot = slots[sp.slot]
            if slot.is_cpu:
                with profiler.span("CPU split", nodes=len(sp.nodes)):
                    self._run_cpu(sp, mem)
                if eval_callback is not None and not self._show(sp, mem, eval_callback):
                    self._record_nodes(prof, launches)
                    return None
                continue
            for root, src_slot, copy in sp.copies:
                self._copy_in(root, src_slot, copy, sp.slot, mem)
            if prof is None:
                slot.backend.graph_compute(sp.graph)
            else:
                launches.setdefault(sp.slot, []).append(prof.now_us())
                with prof.span(f"launch {slot.name}", "host", nodes=len(sp.nodes)):
                    slot.backend.graph_compute(sp.graph)
            if eval_callback is not None:
                slot.backend.synchronize()
                if not self._show(sp, None, eval_callback):
                    self._record_nodes(prof, launches)
                    return None
        out = {}
        with span("download outputs"):
            for name, t, k, shape, dtype in (self._output_reads() if read_outputs else ()):
                if k is None or slots[k].is_cpu:
                    out[name] = mem.read(t).reshape(shape).copy()
                else:   # into a new array: the caller keeps it (no copy of the logits)
                    out[name] = slots[k].backend.get_tensor_async(t, np.empty(shape, dtype))
            for s in slots[:-1]:
                s.backend.synchronize()
        self._record_nodes(prof, launches)
        return out

    def _device_only(self) -> tuple | bool:
        """What a run of a plan on devices alone does, resolved once: (uploads: [(backend,
        [(input name, tensor)])], launches: [(backend, Graph)], reads: [(name, backend,
        tensor, numpy shape, dtype)], backends to synchronize); False when a split, an input
        or an output involves the CPU, or a split copies from another backend (run() then
        takes its general path)."""
        slots = self.sched.slots
        if self._uses_memory() or any(slots[sp.slot].is_cpu or sp.copies for sp in self.splits):
            return False
        uploads = self._uploads()
        launches = [(slots[sp.slot].backend, sp.graph) for sp in self.splits]
        reads = [(name, slots[k].backend, t, shape, dtype)
                 for name, t, k, shape, dtype in self._output_reads()]
        return uploads, launches, reads, [s.backend for s in slots[:-1]]

    @staticmethod
    def _run_device(values: dict, uploads, launches, reads, syncs, kept=None) -> dict:
        """run() of a device-only plan (a decode step's): the same calls in the same order, with
        what they act on resolved once; kept: the outputs go into these (name -> (array,
        pointer to it)) instead of new arrays."""
        for backend, targets in uploads:
            backend.set_tensors_async([(t, values[name]) for name, t in targets])
        for backend, graph in launches:
            backend.graph_compute(graph)
        if kept is None:
            out = {name: backend.get_tensor_async(t, np.empty(shape, dtype))
                   for name, backend, t, shape, dtype in reads}
        else:
            out = {name: backend.get_tensor_async(t, kept[name][0], data=kept[name][1])
                   for name, backend, t, _, _ in reads}
        for backend in syncs:
            backend.synchronize()
        return out

    def run_kept(self, values: dict, names: tuple | None = None) -> dict | None:
        """run() for a caller done with the outputs before the next run of this plan (the
        engine's decode steps): they are read into arrays the plan keeps (no allocation per
        step), name -> (array, pointer to its data: a cffi float[] / int32_t[] for F32 / I32
        outputs, whose items read as Python numbers). names: only these outputs are read (the
        others' arrays are stale until read_kept). None when run() must be used instead (the
        plan involves the CPU, or a profile is being recorded)."""
        if profiler.active() is not None:
            return None
        steps = self._device_steps
        if steps is None:
            steps = self._device_steps = self._device_only()
        if not steps:
            return None
        kept = self._kept
        if kept is None:
            kept = {}
            for name, _, _, shape, dtype in steps[2]:
                array = np.empty(shape, dtype)
                kept[name] = (array, be.array_pointer(array, _C_ARRAYS.get(array.dtype, "char[]")))
            self._kept = kept
        if names is None:
            self._run_device(values, *steps, kept=kept)
        else:
            reads = self._kept_reads.get(names)
            if reads is None:
                reads = self._kept_reads[names] = [r for r in steps[2] if r[0] in names]
            self._run_device(values, steps[0], steps[1], reads, steps[3], kept=kept)
        return kept

    def read_kept(self, name: str) -> tuple:
        """After run_kept(values, names) without `name`: that output too, read into its kept
        array now, (array, pointer). The device still holds it: nothing runs in between (the
        plans share the compute buffers, so this must come before any other plan's run)."""
        for out, backend, t, _, _ in self._device_steps[2]:
            if out == name:
                array, data = self._kept[name]
                backend.get_tensor_async(t, array, data=data)
                backend.synchronize()
                return array, data
        raise KeyError(f"no output {name!r} in this plan")

    def _uploads(self) -> list:
        """(backend, [(input name, tensor), ...]) of the device copies of the inputs, per backend
        in slot order, listed once."""
        uploads = getattr(self, "_upload_list", None)
        if uploads is None:
            slots = self.sched.slots
            per_slot: dict = {}
            for name, targets in self.input_targets.items():
                for slot, t in targets:
                    per_slot.setdefault(slot, []).append((name, t))
            uploads = self._upload_list = [(slots[slot].backend, per_slot[slot])
                                           for slot in sorted(per_slot)]
        return uploads

    def _uses_memory(self) -> bool:
        """Whether a run needs the CPU memory model: a CPU split, a CPU input or an output read
        from the CPU (a device-only decode graph does not)."""
        uses = getattr(self, "_memory_used", None)
        if uses is None:
            slots = self.sched.slots
            uses = self._memory_used = bool(self.cpu_inputs) or any(
                slots[sp.slot].is_cpu or any(slots[src].is_cpu for _, src, _ in sp.copies)
                for sp in self.splits) or any(
                k is None or slots[k].is_cpu for _, _, k, _, _ in self._output_reads())
        return uses

    def _output_reads(self) -> list:
        """(name, tensor, slot index or None, numpy shape, dtype) of every output, read once: a
        decode token reads them each time and every attribute read crosses cffi."""
        reads = self._reads
        if reads is None:
            reads = self._reads = [
                (name, t, self.assign[self.index[t.address]] if t.address in self.index else None,
                 t.shape, t.dtype) for name, t in self.outputs.items()]
        return reads

    def _record_nodes(self, prof, launches: dict) -> None:
        """The profiler's device events for the graphs this run launched (launches: slot -> host
        launch times); takes the backends' timing records, so the next run starts afresh. A
        profiler started after the load finds the backends' timing off: host events only."""
        for k, starts in launches.items():
            slot = self.sched.slots[k]
            if slot.backend.profiling:
                prof.add_nodes(slot.name, slot.backend.take_node_times(), starts)

    def _copy_in(self, root, src_slot, copy, dst_slot, mem):
        slots = self.sched.slots
        if slots[src_slot].is_cpu:
            self._fetch(root, mem)
            slots[dst_slot].backend.set_tensor_async(copy, mem.raw[root.address])
            return
        try:
            slots[src_slot].backend.cpy_tensor_async(slots[dst_slot].backend, root, copy)
        except be.CannError:
            slots[src_slot].backend.synchronize()
            slots[dst_slot].backend.set_tensor_async(copy, _raw(root))

    def _fetch(self, root: be.Tensor, mem: ref.Memory):
        """Bytes of a root that lives in a buffer (device or host) into the CPU memory model."""
        if root.address in mem.raw:
            return
        cache = self.sched.weight_cache
        if root.address in cache:
            mem.raw[root.address] = cache[root.address]
            return
        raw = _raw(root)
        mem.raw[root.address] = raw
        if _is_weights(root):
            cache[root.address] = raw

    def _run_cpu(self, sp: Split, mem: ref.Memory):
        slots = self.sched.slots
        for s in slots[:-1]:                  # device results this split reads are complete
            s.backend.synchronize()
        for addr in [a for a in mem.raw if a not in self.index and a not in self.sched.weight_cache
                     and a not in self._input_addrs]:
            del mem.raw[addr]                 # pre-allocated state (KV) is read afresh
        written = {}
        for n in sp.nodes:
            srcs = []
            for src in ref._sources(n):
                if src is None:
                    srcs.append(None)
                    continue
                root = _root(src)
                if root.address not in mem.raw and root.has_data:
                    self._fetch(root, mem)
                srcs.append(mem.read(src))
            if n.is_view:      # SET_ROWS / CPY into a pre-allocated tensor
                root = _root(n)
                if root.address not in self.index and root.has_data:
                    self._fetch(root, mem)
                    written[root.address] = root
            mem.write(n, ref.compute_node(n, srcs))
        for addr, root in written.items():   # write the state back where it lives
            root.write_bytes(mem.raw[addr])

    def _show(self, sp: Split, mem, callback) -> bool:
        info = _wants_info(callback)
        for n in sp.nodes:
            if mem is not None:
                data = mem.read(n)
            else:
                data = ref.read(_raw(_root(n)), n)
            ne = n.ne
            data = np.asarray(data).reshape(tuple(reversed(ne[:n.n_dims])))
            args = (n.name, n.op_desc, n.type.name, ne, data)
            if info:
                args += (EvalNode(self, sp, n, data, mem),)
            if callback(*args) is False:
                return False
        return True

    def original(self, t: be.Tensor) -> be.Tensor:
        """The graph tensor an input copy or alias made by _wire stands for (else t itself)."""
        orig = getattr(self, "_orig", None)
        if orig is None:
            orig = {alias.address: src for alias, src, _, _ in self.aliases}
            for sp in self.splits:
                orig.update((copy.address, root) for root, _, copy in sp.copies)
            for name, targets in self.input_targets.items():
                orig.update((t2.address, self.inputs[name]) for _, t2 in targets)
            self._orig = orig
        return orig.get(t.address, t)

    # ---- -v --------------------------------------------------------------------------------------
    def describe(self) -> str:
        slots = self.sched.slots
        lines = [f"graph: {len(self.nodes)} nodes, {len(self.splits)} splits"]
        for k, sp in enumerate(self.splits):
            ins = [c[0].name for c in sp.copies]
            extra = f", inputs from other backends: {', '.join(ins)}" if ins else ""
            lines.append(f"  split {k}: {slots[sp.slot].name}, {len(sp.nodes)} nodes "
                         f"({sp.nodes[0].name} .. {sp.nodes[-1].name}){extra}")
        for slot, size in sorted(self.compute_sizes.items()):
            lines.append(f"  {slots[slot].name} compute buffer: {size / 2**20:.2f} MiB "
                         f"(allocated {self.sched.buffers[slot].size / 2**20:.2f} MiB)")
        return "\n".join(lines)

    def counts(self) -> dict:
        """Nodes per backend name (tests)."""
        out: dict = {}
        for sp in self.splits:
            name = self.sched.slots[sp.slot].name
            out[name] = out.get(name, 0) + len(sp.nodes)
        return out


def _no_span(name, cat="host", **args):
    return _NULL_SPAN


_NULL_SPAN = contextlib.nullcontext()


# ---- the eval callback's node record ------------------------------------------------------------

def _wants_info(callback) -> bool:
    """True when the callback takes a sixth positional argument (the EvalNode)."""
    import inspect
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 6


def _display_name(t: be.Tensor) -> str:
    """A tensor's name; an unnamed view as llama.cpp shows it: 'Qcur-0 (permuted)'."""
    if t.name or not t.is_view:
        return t.name
    kind = {Op.PERMUTE: "permuted", Op.RESHAPE: "reshaped", Op.TRANSPOSE: "transposed"}
    return f"{_root(t).name} ({kind.get(t.op, 'view')})"


class EvalNode:
    """What an eval callback taking six arguments gets last: the computed node, valid during the
    call only. `ne` is ggml order (ne[0] fastest, 4 entries); `data` is numpy order with trailing
    unit dims dropped: data.shape == tuple(reversed(ne[:n_dims])). `src_names` are the graph's
    source names (never the scheduler's copies). sources() reads the node's inputs as the
    backend saw them; write() replaces the node's result in its backend's memory, so later nodes
    compute from it (fault injection in tests)."""

    def __init__(self, plan: Plan, sp: Split, node: be.Tensor, data: np.ndarray, mem):
        self.plan, self.node, self.data, self._mem = plan, node, data, mem
        self.name, self.op, self.type, self.ne = node.name, node.op_desc, node.type.name, node.ne
        self.shape = data.shape
        self.backend = plan.sched.slots[sp.slot].name
        self.index = plan.index[node.address]
        self._srcs = ref._sources(node)
        self.src_names = [None if s is None else _display_name(plan.original(s))
                          for s in self._srcs]
        self.src_ne = [None if s is None else s.ne for s in self._srcs]
        self.src_types = [None if s is None else s.type.name for s in self._srcs]

    def sources(self, stored: bool = False) -> list:
        """The sources' values (numpy order, 4-d; None for an absent optional source): decoded
        floats/ints, or with stored=True contiguous storage arrays (quantized rows as bytes)."""
        out = []
        for s in self._srcs:
            if s is None:
                out.append(None)
                continue
            if self._mem is not None:
                root = _root(s)
                if root.address not in self._mem.raw and root.has_data:
                    self.plan._fetch(root, self._mem)
                raw = self._mem.bytes_of(s)
            else:
                raw = _raw(_root(s))
            arr = np.ascontiguousarray(ref.strided(raw, s))
            out.append(arr if stored else ref.decode(s.type, arr))
        return out

    def write(self, values) -> None:
        """Store `values` (the node's shape, numpy order) as this node's result."""
        n = self.node
        values = np.asarray(values).reshape(ref.np_shape(n))
        if self._mem is not None:
            self._mem.write(n, values)
        else:
            root = _root(n)
            raw = _raw(root)
            ref.write(raw, n, values)
            root.write_bytes(raw)
        self.data = np.asarray(ref.round_to(n.type, values)).reshape(self.shape)
