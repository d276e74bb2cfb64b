"""The structure of a Python dataset's samples and default_collate's rules over it.

The first sample fixes a *layout*: the tree of containers ``__getitem__`` returns (dicts,
namedtuples, tuples, lists, any Mapping) with its leaves. A leaf that default_collate stacks into
a tensor (a CPU torch.Tensor, a numeric numpy array or scalar, an int, float or bool) is *fixed*:
it gets a field of the ring, one row of ``nbytes`` per sample, written in place by the worker
thread or process. Every other leaf (str, bytes, None, a PIL image, an empty or non-CPU tensor,
leaves beyond the ring's field limit) is an *object*: it travels beside the row (by reference on
threads, pickled from processes) and is collated in the consumer.

A later sample whose fixed leaf has another dtype or shape keeps the ring's row empty for that
leaf and sends the value as an object (a bit in the row's mask); a sample whose containers differ
(other keys, lengths or types) travels whole. A batch with such rows is collated by torch's own
default_collate over the rebuilt samples, so it gets exactly the DataLoader's result (the same
values, or the same error). Batches without them are assembled from views of the ring: each fixed
leaf is already its stacked tensor, with the dtype default_collate gives it. Nothing is truncated.

collate_fn other than the default is called on the rebuilt list of samples, as the DataLoader
calls it (in the consumer, not in a worker).
"""
import collections.abc
import sys

import numpy as np

MAX_FIXED = 15     # ring fields for leaves (the 16th is the row's object key and mask)
# a leaf's kind in Layout.fast_plan (_core.h's STKPY_FAST_*): written by the C path itself (a
# tensor from its memory, an int or a float from its value), or from _leaf_bytes's buffer
FAST_TENSOR, FAST_INT, FAST_FLOAT, FAST_OTHER = 1, 2, 3, 4
WHOLE = 1 << 63    # mask bit: the sample travels whole (its containers differ from the layout)
_TORCH_NP = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
             "complex64", "complex128"}  # numpy dtypes torch.as_tensor takes


def _torch():
    return sys.modules.get("torch")


_STRIDED = []


def _strided():
    """torch.strided (a leaf of a torch tensor is only ever checked with torch imported)."""
    if not _STRIDED:
        _STRIDED.append(_torch().strided)
    return _STRIDED[0]


# The dtypes whose batch views Batch.leaf_views makes (stoker's own tensor dtypes but bfloat16).
_VIEW_DTYPES = frozenset(("uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                          "float64"))


class Leaf:
    """A leaf of the layout: kind ("tensor", "ndarray", "npscalar", "int", "float", "bool" for
    fixed leaves; "object" otherwise), its exact type, numpy dtype and per-sample shape, and its
    place (fixed: ring field number; object: position in the row's object list)."""

    __slots__ = ("kind", "type", "dtype", "tdtype", "shape", "nbytes", "slot")

    def __init__(self, kind, typ, dtype=None, tdtype=None, shape=(), slot=0):
        self.kind, self.type, self.dtype, self.tdtype = kind, typ, dtype, tdtype
        self.shape = tuple(shape)
        self.nbytes = 0 if dtype is None else int(np.prod(self.shape, dtype=np.int64)) * \
            np.dtype(dtype).itemsize
        self.slot = slot

    @property
    def fixed(self):
        return self.kind != "object"

    def __repr__(self):
        if not self.fixed:
            return f"object({self.type.__name__})"
        return f"{self.kind}({self.dtype}, {list(self.shape)})"


class Node:
    """A container of the layout: kind "mapping" (keys), "namedtuple", "tuple", "list" or
    "sequence" (another Sequence type), its exact type and children."""

    __slots__ = ("kind", "type", "keys", "children")

    def __init__(self, kind, typ, keys, children):
        self.kind, self.type, self.keys, self.children = kind, typ, keys, children


def _tensor_leaf(x):
    """(numpy dtype, torch dtype, shape) of a tensor default_collate stacks here, or None."""
    torch = _torch()
    if x.device.type != "cpu" or x.layout != torch.strided or x.requires_grad or \
            x.numel() == 0 or x.is_quantized:
        return None
    name = str(x.dtype).replace("torch.", "")
    if name == "bfloat16":
        return np.dtype(np.int16), x.dtype, tuple(x.shape)
    if name not in _TORCH_NP:
        return None
    return np.dtype(name), x.dtype, tuple(x.shape)


def leaf_of(x):
    """The Leaf a value makes (slot unset)."""
    t = type(x)
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        info = _tensor_leaf(x)
        if info is not None:
            return Leaf("tensor", t, info[0], info[1], info[2])
    elif isinstance(x, np.ndarray):
        if x.dtype.name in _TORCH_NP and x.size > 0 and x.dtype.isnative:
            return Leaf("ndarray", t, x.dtype, None, x.shape)
    elif isinstance(x, (np.bool_, np.number)):
        if x.dtype.name in _TORCH_NP:
            return Leaf("npscalar", t, x.dtype, None, ())
    elif t is bool:
        return Leaf("bool", t, np.dtype(np.bool_), None, ())
    elif t is int and -(1 << 63) <= x < (1 << 63):
        return Leaf("int", t, np.dtype(np.int64), None, ())
    elif t is float:
        return Leaf("float", t, np.dtype(np.float64), None, ())
    return Leaf("object", t)



def _container(node, kids, batched):
    """The container `node` describes, holding `kids`: a mapping of its type (else a dict), a
    namedtuple, a sequence of its type (else a list); a tuple is a list in a batch (as
    default_collate gives it) and itself in a sample."""
    if node.kind == "mapping":
        d = dict(zip(node.keys, kids))
        try:
            return node.type(d)
        except TypeError:
            return d
    if node.kind == "namedtuple":
        return node.type(*kids)
    if node.kind == "tuple":
        if batched:
            return kids
        return tuple(kids) if node.type is tuple else node.type(kids)
    try:
        return node.type(kids)
    except TypeError:
        return kids

class Layout:
    """The layout the first sample fixes: `root` (a Node or Leaf), the fixed leaves in ring order
    (`fixed`) and the number of object leaves (`n_objects`)."""

    def __init__(self, sample, max_fixed=MAX_FIXED, whole=False):
        self.fixed = []
        self.n_objects = 0
        self.max_fixed = max_fixed
        self.whole = whole
        if whole:  # every sample one object leaf: it travels as __getitem__ returned it
            self.root = Leaf("object", type(sample))
            self.n_objects = 1
        else:
            self.root = self._build(sample, 0)
        self._flat = self._flat_plan()
        self._walk_fn = _compile_walk(self.root)

    def __getstate__(self):  # (sent to worker processes: the compiled walk is made there)
        state = dict(self.__dict__)
        del state["_walk_fn"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._walk_fn = _compile_walk(self.root)

    def _build(self, x, depth):
        if depth < 64:
            if isinstance(x, collections.abc.Mapping):
                keys = list(x.keys())
                return Node("mapping", type(x), keys, [self._build(x[k], depth + 1) for k in keys])
            if isinstance(x, tuple) and hasattr(x, "_fields"):
                return Node("namedtuple", type(x), None, [self._build(v, depth + 1) for v in x])
            if isinstance(x, (tuple, list)) or (
                    isinstance(x, collections.abc.Sequence) and not isinstance(x, (str, bytes))
                    and not isinstance(x, (np.ndarray,)) and not _is_tensor(x)):
                kind = "tuple" if isinstance(x, tuple) else "list" if isinstance(x, list) else \
                    "sequence"
                return Node(kind, type(x), None, [self._build(v, depth + 1) for v in x])
        leaf = leaf_of(x)
        if leaf.fixed and len(self.fixed) < self.max_fixed:
            leaf.slot = len(self.fixed)
            self.fixed.append(leaf)
        else:
            leaf = Leaf("object", type(x))
            leaf.slot = self.n_objects
            self.n_objects += 1
        return leaf

    def _flat_plan(self):
        """(type, [(leaf, is tensor)], keys) when the sample is a tuple or list (keys None) or a
        dict (its keys, in order) of fixed leaves only (tensor224's (tensor, tensor, int), a
        {"image": tensor, "label": int}): fast_plan's; else None."""
        root = self.root
        if not isinstance(root, Node) or not all(isinstance(c, Leaf) and c.fixed
                                                 for c in root.children):
            return None
        if root.kind in ("tuple", "list"):
            keys = None
        elif root.kind == "mapping" and root.type is dict:
            keys = list(root.keys)
        else:
            return None
        return root.type, [(c, c.kind == "tensor") for c in root.children], keys

    def fast_plan(self):
        """The plan both executors' C paths write a sample's leaves by, with no Python frame
        (_ext/_leafput.c): (container type, ((kind, leaf, type, torch dtype, shape, nbytes),
        ...), _leaf_bytes, keys) where flatten has its fast path (a tuple, list or dict of fixed
        leaves), else None (every sample goes through flatten)."""
        flat = self._flat
        if flat is None:
            return None
        torch = _torch()
        leaves = []
        for i, (leaf, is_tensor) in enumerate(flat[1]):
            if leaf.slot != i:  # (a root of fixed leaves only is numbered in order)
                return None
            if is_tensor and torch is not None and not leaf.tdtype.is_complex:
                kind = FAST_TENSOR
            elif leaf.kind == "int" and leaf.type is int:
                kind = FAST_INT
            elif leaf.kind == "float" and leaf.type is float:
                kind = FAST_FLOAT
            else:
                kind = FAST_OTHER
            leaves.append((kind, leaf, leaf.type, leaf.tdtype, leaf.shape, leaf.nbytes))
        keys = tuple(flat[2]) if flat[2] is not None else None
        return flat[0], tuple(leaves), _leaf_bytes, keys

    def leaf_spec(self):
        """((dtype name, shape), ...) of the fixed leaves, as Batch.leaf_views takes them, when
        a batch of rows that all fit is views of those leaves alone (no object leaf, each dtype
        one the ring's views carry: not bool, complex nor bfloat16); else None."""
        if self.n_objects:
            return None
        spec = []
        for leaf in self.fixed:
            name = np.dtype(leaf.dtype).name
            if name not in _VIEW_DTYPES or (leaf.tdtype is not None and
                                            str(leaf.tdtype) != "torch." + name):
                return None
            spec.append((name, leaf.shape))
        return tuple(spec)

    def collate_fixed(self, views):
        """default_collate's result from the views of a layout with no object leaf."""
        return self._collate(self.root, views, None, None, False)

    def sample_fixed(self, views):
        """A batch_size=None loader's sample (row 0) from the views of a layout leaf_spec()
        takes, as default_convert makes it: a tensor leaf and an array or NumPy scalar one as a
        tensor (default_convert's torch.as_tensor of it), an int or float as itself."""
        return self._sample(self.root, views)

    def _sample(self, node, views):
        if isinstance(node, Leaf):
            v = views[node.slot][0]
            return int(v) if node.kind == "int" else float(v) if node.kind == "float" else v
        kids = [self._sample(c, views) for c in node.children]
        return _container(node, kids, batched=False)

    def describe(self):
        """A short text of the structure: "(tensor(float32, [3, 224, 224]), int(...))"."""
        if self.whole:
            return f"whole samples ({self.root.type.__name__}) for collate_fn"
        return _describe(self.root)

    def fields(self):
        """The C loader's sample fields: one uint8 [nbytes] array per fixed leaf, then the
        row's object key and mask (int64 [2])."""
        out = [(f"f{i}", "array", "uint8", (leaf.nbytes,)) for i, leaf in enumerate(self.fixed)]
        out.append(("_obj", "array", "int64", (2,)))
        return out

    # ---- a worker's side: a sample into row buffers ----

    def flatten(self, sample, pointers=False):
        """(bufs, objects, extras, mask): bufs[i] a C-contiguous buffer of fixed leaf i's
        nbytes (None where the leaf does not fit and went to extras under mask bit i); objects
        the object leaves in order. A sample whose containers differ from the layout comes back
        as (None, None, sample, WHOLE). pointers=True (the thread executor, whose C copy reads
        the memory in this process): a torch tensor leaf comes as (tensor, data_ptr) instead
        of its .numpy(), which lets the GIL go and take it again (see _tensor_pointer)."""
        if self.whole:
            return [], [sample], {}, 0
        bufs = [None] * len(self.fixed)
        objects = [None] * self.n_objects
        extras = {}
        walk = self._walk_fn
        ok = walk(sample, bufs, objects, extras, pointers) if walk is not None else \
            self._walk(self.root, sample, bufs, objects, extras, pointers)
        if not ok:
            return None, None, sample, WHOLE
        mask = 0
        for i in extras:
            mask |= 1 << i
        return bufs, objects, extras, mask

    def _walk(self, node, x, bufs, objects, extras, pointers):
        # (the walk of layouts past _WALK_NODES nodes; _compile_walk writes the same steps out)
        if isinstance(node, Leaf):
            if not node.fixed:
                objects[node.slot] = x
                return True
            b = _tensor_pointer(node, x) if pointers and node.kind == "tensor" else \
                _leaf_bytes(node, x)
            if b is None:
                extras[node.slot] = x
            else:
                bufs[node.slot] = b
            return True
        if type(x) is not node.type:
            return False
        if node.kind == "mapping":
            if len(x) != len(node.keys):
                return False
            try:
                values = [x[k] for k in node.keys]
            except (KeyError, TypeError):
                return False
            if list(x.keys()) != node.keys:
                return False
        else:
            values = x
            if len(values) != len(node.children):
                return False
        for child, v in zip(node.children, values):
            if not self._walk(child, v, bufs, objects, extras, pointers):
                return False
        return True

    # ---- the consumer's side ----

    def views(self, arrays, n, torch):
        """Fixed leaf i's batch [n, *shape] from the ring field's uint8 [n, nbytes] array:
        torch tensors of the leaf's dtype (numpy arrays when torch is None), zero-copy."""
        out = []
        for leaf, a in zip(self.fixed, arrays):
            v = a[:n].view(leaf.dtype).reshape((n,) + leaf.shape)
            if torch is not None:
                t = torch.from_numpy(v)
                if leaf.tdtype is not None and leaf.tdtype != t.dtype:  # bfloat16
                    t = t.view(leaf.tdtype)
                v = t
            out.append(v)
        return out

    def collate(self, views, objects, torch):
        """default_collate's result for a batch whose rows all fit the layout: fixed leaves are
        their views; object leaves go through default_collate (objects[row][slot])."""
        return self._collate(self.root, views, objects, _default_collate(torch), False)

    def _collate(self, node, views, objects, collate_obj, in_seq):
        # (a method, not a nested function: a recursive closure is a reference cycle that would
        # keep the batch's views, and so its ring slot, alive until the garbage collector runs)
        if isinstance(node, Leaf):
            if node.fixed:
                return views[node.slot]
            # default_collate hands a leaf the samples' values as a list under a mapping (and at
            # the top), as a tuple under a sequence (zip(*batch)): str leaves keep that type
            values = [row[node.slot] for row in objects]
            return collate_obj(tuple(values) if in_seq else values)
        seq = node.kind != "mapping"
        kids = [self._collate(c, views, objects, collate_obj, seq) for c in node.children]
        return _container(node, kids, batched=True)

    def samples(self, views, np_views, objects, extras, masks):
        """The samples of a batch as __getitem__ returned them (fixed leaves as views of their
        rows), for a collate_fn or for default_collate over mixed rows."""
        if self.whole:  # (no row has a mask: nothing is fixed)
            return [row[0] for row in objects]
        out = []
        for r, mask in enumerate(masks):
            if mask & WHOLE:
                out.append(extras[r])
                continue
            out.append(self._rebuild(self.root, r, views, np_views, objects[r], extras[r]))
        return out

    def _rebuild(self, node, r, views, np_views, objs, extras):
        if isinstance(node, Leaf):
            if not node.fixed:
                return objs[node.slot]
            if extras and node.slot in extras:
                return extras[node.slot]
            k = node.kind
            if k == "tensor":
                return views[node.slot][r]
            a = np_views[node.slot][r]
            if k == "ndarray":
                return a
            if k == "npscalar":
                return a[()]
            return node.type(a)
        kids = [self._rebuild(c, r, views, np_views, objs, extras) for c in node.children]
        return _container(node, kids, batched=False)


def _describe(n):
    if isinstance(n, Leaf):
        return repr(n) if n.fixed else f"object {n.type.__name__}"
    if n.kind == "mapping":
        return "{" + ", ".join(f"{k!r}: {_describe(c)}" for k, c in zip(n.keys, n.children)) + "}"
    inner = ", ".join(_describe(c) for c in n.children)
    return ("(" + inner + ")") if n.kind in ("tuple", "namedtuple") else "[" + inner + "]"


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_WALK_NODES = 512  # layouts with more nodes are walked by Layout._walk (compiling costs more)


def _compile_walk(root):
    """walk(x, bufs, objects, extras, pointers) -> bool doing Layout._walk's steps for this
    layout as one straight-line function (the pattern of collections.namedtuple): no recursion,
    no per-node type tests of the layout, each container's type, length and keys checked and its
    values unpacked in place, an int written in line. Texts' samples (bench/tiny_datasets.py:
    ids, label, text, a list of 4 word ids, an id string) walked in 0.48 s per 20,000 under
    cProfile, now 0.11 s (issue 24, object leaves). None past _WALK_NODES nodes."""
    nodes = [0]

    def count(n):
        nodes[0] += 1
        if isinstance(n, Node) and nodes[0] <= _WALK_NODES:
            for c in n.children:
                count(c)
    count(root)
    if nodes[0] > _WALK_NODES:
        return None
    env = {"_lb": _leaf_bytes, "_tp": _tensor_pointer}
    body = []
    names = iter(range(1 << 30))

    def emit(node, var):
        k = next(names)
        if isinstance(node, Leaf):
            if not node.fixed:
                body.append(f"objects[{node.slot}] = {var}")
                return
            if node.kind == "int" and node.type is int:  # (_leaf_bytes's int, in line)
                body.extend([f"if type({var}) is int and {_I64_MIN} <= {var} <= {_I64_MAX}:",
                             f"    bufs[{node.slot}] = {var}.to_bytes(8, 'little', signed=True)",
                             "else:", f"    extras[{node.slot}] = {var}"])
                return
            env[f"L{k}"] = node
            put = f"_tp(L{k}, {var}) if pointers else _lb(L{k}, {var})" \
                if node.kind == "tensor" else f"_lb(L{k}, {var})"
            body.extend([f"b = {put}", "if b is None:", f"    extras[{node.slot}] = {var}",
                         "else:", f"    bufs[{node.slot}] = b"])
            return
        env[f"T{k}"] = node.type
        n = len(node.children)
        kids = [f"v{k}_{i}" for i in range(n)]
        body.append(f"if type({var}) is not T{k} or len({var}) != {n}:")
        body.append("    return False")
        if node.kind == "mapping":
            env[f"K{k}"] = node.keys
            body.append("try:")
            body.extend(f"    {c} = {var}[K{k}[{i}]]" for i, c in enumerate(kids))
            body.extend(["except (KeyError, TypeError):", "    return False",
                         f"if list({var}.keys()) != K{k}:", "    return False"])
        elif n:
            body.append(f"{', '.join(kids)}, = {var}")
        for child, c in zip(node.children, kids):
            emit(child, c)

    emit(root, "x")
    src = "def walk(x, bufs, objects, extras, pointers):\n" + \
        "".join(f"    {line}\n" for line in body) + "    return True\n"
    exec(compile(src, "<stoker layout walk>", "exec"), env)
    return env["walk"]


def _is_tensor(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _tensor_pointer(leaf, x):
    """A tensor leaf as (tensor, address of its leaf.nbytes contiguous bytes), or None as
    _leaf_bytes. For the thread executor's copy (_ext/_pyexec.c), which reads the bytes while
    the pair keeps the tensor alive. Not x.numpy(): in torch 1.13 .numpy() releases the GIL and
    takes it again, and with dozens of worker threads waiting each release wakes one of them
    for nothing (issue 24, sleep scenario: 2 of the 6.5 GIL releases per sample)."""
    # (the cheapest equal tests: torch.Size is a tuple, is_cpu is device.type == "cpu" without
    # building a device object: issue 24, tensor224 (pytens))
    if type(x) is not leaf.type:
        return None
    if x.dtype != leaf.tdtype or x.shape != leaf.shape or not x.is_cpu or \
            x.requires_grad or x.layout is not _strided():
        return None
    if not x.is_contiguous():
        x = x.contiguous()
    return x, x.data_ptr()


def _leaf_bytes(leaf, x):
    """x as a C-contiguous buffer of exactly leaf.nbytes in the leaf's dtype, or None when it
    has another type, dtype or shape (it then travels as an object)."""
    if type(x) is not leaf.type:
        return None
    k = leaf.kind
    if k == "tensor":
        if x.dtype != leaf.tdtype or tuple(x.shape) != leaf.shape or x.device.type != "cpu" or \
                x.requires_grad or x.layout is not _strided():
            return None
        if leaf.tdtype != x.dtype or str(x.dtype) == "torch.bfloat16":
            x = x.view(_torch().int16)
        return x.contiguous().numpy()
    if k == "ndarray":
        if x.dtype != leaf.dtype or x.shape != leaf.shape:
            return None
        return np.ascontiguousarray(x)
    if k == "npscalar":
        return x.tobytes() if x.dtype == leaf.dtype else None
    if k == "int":
        try:
            return x.to_bytes(8, "little", signed=True)
        except OverflowError:
            return None
    if k == "float":
        return np.float64(x).tobytes()
    if k == "bool":
        return b"\x01" if x else b"\x00"
    return None


def _default_collate(torch):
    if torch is not None:
        from torch.utils.data._utils.collate import default_collate
        return default_collate
    return numpy_collate


def numpy_collate(batch):
    """default_collate's rules with numpy arrays for tensors (when torch is not importable)."""
    elem = batch[0]
    if isinstance(elem, np.ndarray) or isinstance(elem, (np.bool_, np.number)):
        return np.stack([np.asarray(b) for b in batch])
    if type(elem) is bool:
        return np.array(batch, dtype=np.bool_)
    if isinstance(elem, int):
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, float):
        return np.array(batch, dtype=np.float64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return {k: numpy_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(numpy_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [numpy_collate(s) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain numpy arrays, numbers, dicts or "
                    f"lists; found {type(elem)}")


def collate_rows(layout, views, np_views, objects, extras, masks, collate_fn, torch):
    """The batch of n rows: default_collate's result (from views when every row fits the
    layout, else over the rebuilt samples), or collate_fn(samples)."""
    if collate_fn is None and not any(masks):
        return layout.collate(views, objects, torch)
    samples = layout.samples(views, np_views, objects, extras, masks)
    fn = collate_fn if collate_fn is not None else _default_collate(torch)
    return fn(samples)
