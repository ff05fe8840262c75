"""Upload a GGUF model's weights to device buffers: map -> device in chunks, conversions at load.

load_weights() creates one backend.Context holding a tensor per GGUF tensor (the GGUF names),
asks `buffer_type_for(name)` where each one lives (a layer split across devices, or a host buffer
type for the CPU fallback), allocates one WEIGHTS buffer per buffer type sized by summing
clm_buft_alloc_size (rounded to the buffer type's alignment; more buffers only past max_size) and
streams the bytes from the memory map with clm_tensor_set in chunks of whole rows of a few MiB,
a few tensors at a time on loader threads (the C work runs without the GIL), and releases each
chunk's pages of the map once it is on its device: the host never holds a second copy of the
model, only the chunks in flight (releasing a whole tensor at its end kept a 138 MiB embedding
resident twice for a moment).

Types the device keeps (F32, F16, BF16, Q8_0, Q4_0, Q4_1) are uploaded as they are. Others are
converted chunk by chunk in C (backend.convert -> clm_convert): Q4_K onto Q4_1 blocks, the
rest to Q8_0. The
`convert` argument instead converts every weight matrix (2-D or more) to the given type;
1-D tensors (norms, biases) always stay as they are.

Where the device's memory is the host's (acl_host) and use_mmap is on, tensors of 1 MiB or more
that the device keeps as ggml keeps them (F32, F16, BF16) with no conversion stay in the file's
map: one buffer over the
whole map (Device.buffer_from_host_ptr, aclrtHostRegister) holds them at their file offsets, so
they are checked but never copied, and their pages are the file's cache (llama.cpp's mmap).

`fusions` (Arch.weight_fusions) names projections of one input to load as one tensor, their rows
stacked (a layer's Q, K and V as attn_qkv; its FFN gate and up as ffn_gate_up): a group whose
parts share a target type and buffer type, and of which none stays in the map, gets one tensor
under the fused name, each part streamed into its rows; the parts' names are then not in the
store. One product in place of three or two: fewer launches and pool jobs per token.

Each chunk is checked for non-finite values (F32/F16/BF16 elements, quantized blocks' scales and
mins: backend.find_nonfinite) while it is in cache on its way up, so a corrupt file is a GGUFError
naming the tensor and the first bad block rather than NaN logits later (check=False skips it).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Callable

import numpy as np

from . import backend, weight_cache
from .ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType
from .loader import KEPT_TYPES, GGUFError, GGUFFile, TensorInfo, type_name

__all__ = ["WeightStore", "load_weights", "target_type", "parse_type", "CONVERT_TARGETS"]

T = GGMLQuantizationType
CONVERT_TARGETS = (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1)
CHUNK_BYTES = 4 << 20
_MAP_ALIGNMENT = 32     # the mapped buffer type's placement rule (GGUF's default alignment)
# Smaller tensors (norms, biases) are copied: reading one from the map faults in its neighbours'
# pages too (fault-around), which kept 11 MiB of the default model's file resident for 140 KB of
# norms; a copy of a small tensor costs nothing.
_MAP_MIN_BYTES = 1 << 20
# A miss writes the weight cache's entry this long after the load (or at close, if sooner): the
# write fills fresh page cache, which slowed the load here even from a niced thread (on a VM whose
# host reclaims free memory, likely the host backing the pages again), so it waits until the
# first tokens are out (started at once, it made the default model's open to first token
# 387-522 ms, against 136-221 ms without a cache).
CACHE_WRITE_DELAY_S = 2.0


def parse_type(value) -> int:
    """A target type from an int, a GGMLQuantizationType or a name ("q8_0", "F16")."""
    if isinstance(value, str):
        try:
            value = T[value.upper()]
        except KeyError:
            raise ValueError(f"unknown type {value!r} (choose from "
                             f"{', '.join(t.name for t in CONVERT_TARGETS)})") from None
    value = T(int(value))
    if value not in CONVERT_TARGETS:
        raise ValueError(f"cannot convert to {value.name} (choose from "
                         f"{', '.join(t.name for t in CONVERT_TARGETS)})")
    return int(value)


def default_target(src_type: int) -> int:
    """The type a tensor the device cannot hold becomes: Q4_K -> Q4_1, others -> Q8_0."""
    if src_type in KEPT_TYPES:
        return int(src_type)
    return int(T.Q4_1) if src_type == T.Q4_K else int(T.Q8_0)


def target_type(info: TensorInfo, convert: int | None = None) -> int:
    """The type `info` gets on the device (see the module docstring)."""
    if convert is not None and info.n_dims >= 2:
        dst = int(convert)
    else:
        dst = default_target(info.type)
    if info.ne[0] % GGML_QUANT_SIZES[T(dst)][0]:
        dst = int(T.F32) if info.n_dims == 1 else int(T.Q8_0)
        if info.ne[0] % 32:   # not even Q8_0 blocks: keep full precision
            dst = int(T.F16)
    return dst


class WeightStore:
    """The model's weight tensors on their devices. Owns their Context and Buffers."""

    def __init__(self, ctx: backend.Context, tensors: dict, buffers: list, stats: dict):
        self.ctx = ctx
        self.tensors: dict[str, backend.Tensor] = tensors
        self.buffers: list[backend.Buffer] = buffers
        self.stats = stats    # bytes_read, bytes_device, seconds, converted {(src, dst): count}
        self._cache_job = None      # writes the weights' image to the weight cache, once
        self._cache_timer = None    # ... started by this timer's thread, or by wait_cache
        self._cache_lock = threading.Lock()

    def _write_cache_later(self, job: Callable[[], None], delay: float) -> None:
        self._cache_job = job
        self._cache_timer = threading.Timer(delay, self._write_cache, kwargs={"niced": True})
        self._cache_timer.name = "cann-llm-weight-cache"
        self._cache_timer.start()

    def _write_cache(self, niced: bool = False) -> None:
        with self._cache_lock:
            job, self._cache_job = self._cache_job, None
        if job is None:
            return
        if niced:       # the timer's thread: beside whatever the model is doing by then
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            except (AttributeError, OSError):
                pass
        job()

    def wait_cache(self) -> str:
        """Write the weight cache's entry now if it is still due, or wait until it is written:
        the cache's state, "off", "hit", "written" or "not written"."""
        if self._cache_timer is not None:
            self._cache_timer.cancel()
            self._write_cache()
            self._cache_timer.join()
            self._cache_timer = None
        return self.stats.get("cache", "off")

    def __getitem__(self, name: str) -> backend.Tensor:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, default=None):
        return self.tensors.get(name, default)

    @property
    def nbytes(self) -> int:
        """Bytes of the weights in device memory, and of those left in the file's map."""
        kept = self.stats.get("bytes_mapped", 0) + self.stats.get("bytes_cached", 0)
        return sum(b.size for b in self.buffers if not b.closed and not b.from_host_ptr) + kept

    def close(self) -> None:
        self.wait_cache()       # the writer reads the buffers
        self.tensors = {}
        for buffer in self.buffers:
            buffer.close()
        self.buffers = []
        self.ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _map_device(gguf: GGUFFile, buffer_type_for, use_mmap: bool):
    """The device whose buffer over the file's map can hold weights, or None: every tensor on
    one device buffer type whose device reads host memory where it lies."""
    if not use_mmap or not gguf.tensors:
        return None
    bufts = {buffer_type_for(name) for name in gguf.tensors}
    if len(bufts) != 1:
        return None
    buft = bufts.pop()
    device = buft.device
    return device if device is not None and not buft.is_host and \
        device.caps_buffer_from_host_ptr else None


def _mappable(device, info: TensorInfo, dst: int) -> bool:
    """info can stay in the file's map on `device` (None: no map) as type dst."""
    return device is not None and dst == info.type and device.maps_host_type(dst) and \
        info.offset % _MAP_ALIGNMENT == 0 and info.nbytes >= _MAP_MIN_BYTES


def _plan_fusions(gguf: GGUFFile, fusions, convert, buffer_type_for, device) -> dict:
    """part name -> (fused name, fused ne, byte offset of the part's rows in the fused tensor),
    for the groups of `fusions` (Arch.weight_fusions) whose every part is in the file and would
    be copied (none stays in the map: a fused tensor is a copy), with one target type and buffer
    type, the same row length and at most 2 dimensions."""
    plan = {}
    for group in fusions:
        members = {}
        for fused, parts in group:
            infos = [gguf.tensors.get(p) for p in parts]
            if any(i is None for i in infos) or fused in gguf.tensors:
                break
            dsts = {target_type(i, convert) for i in infos}
            dims = {i.n_dims for i in infos}
            if len(dsts) != 1 or len({buffer_type_for(p) for p in parts}) != 1 or \
                    len(dims) != 1 or max(dims) > 2 or \
                    (infos[0].n_dims == 2 and len({i.ne[0] for i in infos}) != 1):
                break
            dst = dsts.pop()
            if any(_mappable(device, i, dst) for i in infos):
                break
            ne = (infos[0].ne[0], sum(i.ne[1] for i in infos)) if infos[0].n_dims == 2 \
                else (sum(i.ne[0] for i in infos),)
            block, size = GGML_QUANT_SIZES[T(dst)]
            before = 0
            for info in infos:
                members[info.name] = (fused, ne, before // block * size)
                before += info.n_elements
        else:
            plan.update(members)
    return plan


def _place(ctx, gguf: GGUFFile, buffer_type_for, convert, use_mmap=True, cache=None, check=True,
           fusions=()):
    """Create the tensors, group them by buffer type and allocate the buffers; tensors that can
    stay in the file's map are placed there, and the rest in the weight cache's image of their
    buffer when it holds one; the parts of each fusion `_plan_fusions` keeps become one tensor
    of stacked rows under the fused name (the parts' names are not in the store). Returns
    (tensors, buffers, names of mapped tensors, CachedImage, uploads: (tensor name, TensorInfo,
    byte offset in the tensor) per source tensor, in file order)."""
    tensors, groups, mapped, uploads = {}, {}, set(), []
    device = _map_device(gguf, buffer_type_for, use_mmap)
    part_of = _plan_fusions(gguf, fusions, convert, buffer_type_for, device)
    map_buffer = None
    for name, info in gguf.tensors.items():
        dst = target_type(info, convert)
        if name in part_of:
            fused, ne, at = part_of[name]
            if fused not in tensors:    # at its first part: the whole fused tensor
                tensors[fused] = ctx.new_tensor(dst, ne, fused)
                groups.setdefault(buffer_type_for(name), []).append(tensors[fused])
            uploads.append((fused, info, at))
            continue
        tensor = ctx.new_tensor(dst, info.ne, name)
        tensors[name] = tensor
        uploads.append((name, info, 0))
        if _mappable(device, info, dst):
            if map_buffer is None:
                map_buffer = device.buffer_from_host_ptr(gguf.map_memory)
                map_buffer.usage = backend.BufferUsage.WEIGHTS
            tensor.alloc(map_buffer, info.offset)
            mapped.add(name)
            continue
        buft = buffer_type_for(name)
        groups.setdefault(buft, []).append(tensor)
    buffers = [map_buffer] if map_buffer is not None else []
    image = _cached_image(gguf, device, groups, cache, check)
    if image is not None and image.entry is not None:
        try:
            buffer = device.buffer_from_image(image.entry)
        except backend.CannError:       # e.g. registration refused: load as without the cache
            image.entry = None
        else:
            buffer.usage = backend.BufferUsage.WEIGHTS
            backend.place_tensors([], image.entries, buffer)
            buffers.append(buffer)
            image.buffer = buffer
            groups = {}
    for buft, members in groups.items():
        try:
            placed = backend.alloc_tensors(members, buft, max_size=buft.max_size,
                                           usage=backend.BufferUsage.WEIGHTS)
        except backend.CannError as exc:
            total = max(t for _, t in backend.layout_tensors(members, buft,
                                                             max_size=buft.max_size))
            for buffer in buffers:
                buffer.close()
            raise backend.CannError(exc.status, f"cannot allocate {total / 2**20:.1f} MiB of "
                                    f"weights in {buft.name}: {exc.message}") from None
        if image is not None:
            image.buffer = placed[0]
        buffers += placed
    return tensors, buffers, mapped, image, uploads


class CachedImage:
    """The weights buffer the weight cache covers: its layout, and the cached image it lies in
    (entry; None: the buffer is filled by the upload and written to the cache afterwards)."""

    def __init__(self, cache, entries, total, layout, entry):
        self.cache, self.entries, self.total, self.layout = cache, entries, total, layout
        self.entry = entry
        self.buffer = None


# fp16 regions checked in a cached image, after `quants` bytes per block (docs/quant_layouts.md):
# scales, and Q4_1's kept m or d; Q4_1's offset 8 + m/d may overflow fp16 for finite inputs.
_IMAGE_SCALES = {T.Q8_0: (32, (0,)), T.Q4_0: (16, (0,)), T.Q4_1: (16, (0, 2))}


def _image_nonfinite(entries, image) -> str | None:
    """The first cached tensor whose checked values (as the GGUF check reads them) are not all
    finite in `image`, or None."""
    for tensor, offset, _ in entries:
        ttype = T(int(tensor.type))
        if ttype in _IMAGE_SCALES:
            quants, regions = _IMAGE_SCALES[ttype]
            n_blocks = tensor.nelements // 32
            for r in regions:
                start = offset + n_blocks * (quants + 2 * r)
                if backend.find_nonfinite(T.F16, image[start:start + 2 * n_blocks]) >= 0:
                    return tensor.name
        elif ttype in (T.F32, T.F16, T.BF16):
            if backend.find_nonfinite(ttype, image[offset:offset + tensor.nbytes]) >= 0:
                return tensor.name
        else:
            return tensor.name      # a type the cache does not know how to check
    return None


def _cached_image(gguf: GGUFFile, device, groups: dict, cache, check: bool) -> CachedImage | None:
    """The weight cache's view of the weights not left in the file's map: all in one buffer of
    the map device's own buffer type, big enough to be worth a file; its entry when it matches
    (and, with check, holds only finite values where the GGUF check looks)."""
    if cache is None or device is None or len(groups) != 1:
        return None
    (buft, members), = groups.items()
    if buft != device.buffer_type:
        return None
    batches = backend.layout_tensors(members, buft, max_size=buft.max_size)
    if len(batches) != 1 or batches[0][1] < weight_cache.MIN_IMAGE_BYTES:
        return None
    entries, total = batches[0]
    layout = weight_cache.describe_layout(buft, entries)
    entry = cache.lookup(gguf.path, gguf.stat, layout, total)
    if entry is not None and check and _image_nonfinite(entries, entry) is not None:
        entry = None        # damaged: rebuilt from the GGUF, whose own check names what is wrong
    return CachedImage(cache, entries, total, layout, entry)


def _check_finite(info: TensorInfo, chunk, first_row: int, n_rows: int) -> None:
    """GGUFError when a chunk of whole rows of info (ggml bytes) holds a non-finite value."""
    first = backend.find_nonfinite(info.type, chunk, n_rows * info.ne[0])
    if first < 0:
        return
    block = GGML_QUANT_SIZES[T(info.type)][0]
    per_row = info.ne[0] // block
    index = first_row * per_row + first
    row, col = divmod(index, per_row)
    if block == 1:
        where = f"element {index} (row {row}, column {col}) is {_value(info.type, chunk, first)}"
    else:
        where = (f"block {index} (row {row}, elements {col * block}..{col * block + block - 1}) has "
                 f"a non-finite scale or min")
    raise GGUFError(f"tensor {info.name!r} ({type_name(info.type)}): {where}; the file is corrupt "
                    f"(load with check=False / --no-check to skip this check)")


def _value(ttype: int, chunk, i: int) -> str:
    dtype = {T.F32: np.float32, T.F16: np.float16}.get(T(ttype))
    if dtype is None:  # BF16: the high half of an F32
        bits = int(np.frombuffer(chunk, dtype=np.uint16, count=1, offset=2 * i)[0])
        return str(np.float32(np.uint32(bits << 16).view(np.float32)))
    return str(np.frombuffer(chunk, dtype=dtype, count=1, offset=i * np.dtype(dtype).itemsize)[0])


def _upload(tensor: backend.Tensor, info: TensorInfo, chunk_bytes: int, check: bool = True,
            release: Callable[[int, int], None] | None = None, mapped: bool = False,
            at: int = 0) -> int:
    """Stream info.data (ggml bytes in the map) into tensor from byte `at` (of its ggml bytes: a
    part of a fused tensor), converting when the types differ, checking each chunk for
    non-finite values first (check); release(start, end) is called with each chunk's file range
    once it is up. mapped: the tensor lies in the map, only checked. Returns the source bytes
    read."""
    src_block, src_size = GGML_QUANT_SIZES[T(info.type)]
    dst_type = int(tensor.type)
    dst_block, dst_size = GGML_QUANT_SIZES[T(dst_type)]
    n_rows = info.n_elements // info.ne[0]
    src_row = info.ne[0] // src_block * src_size
    dst_row = info.ne[0] // dst_block * dst_size
    rows = max(1, chunk_bytes // max(src_row, dst_row))
    data = info.data
    if dst_type == info.type:
        for r in range(0, n_rows, rows):
            n = min(rows, n_rows - r)
            chunk = data[r * src_row:(r + n) * src_row]
            if check:
                _check_finite(info, chunk, r, n)
            if mapped:          # the tensor lies in the map itself: checked, nothing to copy
                continue
            tensor.write_bytes(chunk, at + r * src_row)
            if release is not None:
                release(info.offset + r * src_row, info.offset + (r + n) * src_row)
        return info.nbytes
    out = np.empty(min(rows, n_rows) * dst_row, dtype=np.uint8)
    for r in range(0, n_rows, rows):
        n = min(rows, n_rows - r)
        dst = out[:n * dst_row]
        chunk = data[r * src_row:(r + n) * src_row]
        if check:
            _check_finite(info, chunk, r, n)
        backend.convert(info.type, chunk, dst_type, dst, n * info.ne[0])
        tensor.write_bytes(dst, at + r * dst_row)
        if release is not None:
            release(info.offset + r * src_row, info.offset + (r + n) * src_row)
    return info.nbytes


def _upload_one(gguf: GGUFFile, tensor: backend.Tensor, info: TensorInfo, chunk_bytes: int,
                check: bool, mapped: bool = False, at: int = 0) -> tuple[int, float]:
    """One tensor's upload (on a loader thread): (bytes read, seconds); its pages of the map are
    released chunk by chunk as they go up (and all of them on an error), unless the tensor lies
    in the map (mapped). Errors name the file and the tensor."""
    t1 = time.perf_counter()
    try:
        try:
            n = _upload(tensor, info, chunk_bytes, check,
                        None if mapped else gguf.release_range, mapped, at)
        except BaseException:
            if not mapped:
                gguf.release_pages(info)
            raise
    except GGUFError as exc:
        raise GGUFError(f"{gguf.path}: {exc}") from None
    except backend.CannError as exc:
        raise backend.CannError(exc.status, f"{gguf.path}: tensor {info.name!r}: "
                                f"{exc.message}") from None
    return n, time.perf_counter() - t1


def load_weights(gguf: GGUFFile, buffer_type_for: Callable[[str], backend.BufferType],
                 convert: int | str | None = None, log=print,
                 chunk_bytes: int = CHUNK_BYTES, check: bool = True,
                 threads: int | None = None, use_mmap: bool = True,
                 cache: "weight_cache.WeightCache | None" = None, fusions=()) -> WeightStore:
    """Place and upload every tensor of `gguf` (see the module docstring); check: refuse
    non-finite weights; use_mmap: leave the tensors that can stay in the file's map there;
    cache: a WeightCache to read the converted weights from, or write them to (with check and
    use_mmap on, on a device whose memory is the host's); fusions: groups of tensors to load as
    one (Arch.weight_fusions; those that qualify, see _plan_fusions).
    `threads` (default: the cores, at most 8) upload, check and convert tensors side by side
    (the C work runs without the GIL); a failure is reported for the first failing tensor in
    file order, as a single thread would."""
    if convert is not None:
        convert = parse_type(convert)
    t0 = time.perf_counter()
    ctx = backend.Context(max_tensors=len(gguf.tensors) + 8)
    try:
        tensors, buffers, mapped, image, uploads = _place(ctx, gguf, buffer_type_for, convert,
                                                          use_mmap, cache, check, fusions)
    except BaseException:
        ctx.close()
        raise
    store = WeightStore(ctx, tensors, buffers, {})
    converted, convert_s, bytes_read = Counter(), 0.0, 0
    threads = max(1, min(int(threads or os.cpu_count() or 1), 8, len(gguf.tensors) or 1))
    cached = {t.name for t, _, _ in image.entries} if image is not None and image.entry else set()
    items = [u for u in uploads if u[0] not in cached]
    try:
        if threads == 1:
            outcome = [(item, _upload_one(gguf, tensors[item[0]], item[1], chunk_bytes, check,
                                          item[0] in mapped, item[2]))
                       for item in items]
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(threads, thread_name_prefix="cann-llm-load") as pool:
                futures = [pool.submit(_upload_one, gguf, tensors[name], info, chunk_bytes, check,
                                       name in mapped, at)
                           for name, info, at in items]
                try:
                    outcome = [(item, f.result()) for item, f in zip(items, futures)]
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
        for (name, info, _), (n, seconds) in outcome:
            bytes_read += n
            if int(tensors[name].type) != info.type:
                converted[(info.type, int(tensors[name].type))] += 1
                convert_s += seconds
    except BaseException:
        store.close()
        raise
    seconds = time.perf_counter() - t0
    if converted and log is not None:
        what = ", ".join(f"{n} {type_name(s)} -> {type_name(d)}"
                         for (s, d), n in sorted(converted.items()))
        log(f"cann-llm: converted {sum(converted.values())} tensors at load ({what}) "
            f"in {convert_s:.2f} s")
    store.stats = {"bytes_read": bytes_read, "bytes_device": store.nbytes, "seconds": seconds,
                   "converted": dict(converted),
                   "bytes_mapped": sum(tensors[name].nbytes for name in mapped),
                   "bytes_cached": image.total if cached else 0,
                   "fused": sum(1 for name in tensors if name not in gguf.tensors),
                   "cache": "off" if image is None else "hit" if cached else "not written"}
    if image is not None and not cached and check:
        store.stats["cache"] = "writing"
        store._write_cache_later(lambda: _store_image(gguf, image, store.stats),
                                 CACHE_WRITE_DELAY_S)
    return store


def _store_image(gguf: GGUFFile, image: CachedImage, stats: dict) -> None:
    """The weights buffer's image into the cache, then stats["cache"] = "written"; a failure only
    costs the next load its conversions: "not written", and why in stats["cache_error"] (it may
    happen in the middle of a streamed answer, so it is not printed; `-v` and bench show it)."""
    try:
        image.cache.store(gguf.path, gguf.stat, image.layout, image.buffer, image.total)
        stats["cache"] = "written"
    except Exception as exc:    # noqa: BLE001 (never fails the load it serves)
        stats["cache"], stats["cache_error"] = "not written", str(exc)


__all__ += ["GGUFError"]
