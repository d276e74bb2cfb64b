""".npy headers read as strictly as numpy (issue 30): each hand-made header below is given to
numpy.load and to stoker; where numpy refuses it stoker refuses it (with the file named), where
numpy reads it stoker reads the same shape. One deliberate difference: a header with a key twice
(numpy takes the last) is refused, so that no two readers of one file can see two shapes."""
import io

import numpy as np
import pytest

import stoker

OK = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }"


def npy_bytes(header, version=1, rows=16):
    """A .npy file whose header dict is `header` verbatim (padded as numpy pads), then zeros."""
    h = header.encode("latin1" if version < 3 else "utf8")
    pre = 10 if version == 1 else 12
    h = h + b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    size = len(h).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + h + b"\0" * (rows * 4 * 2)


CASES = [
    # (header, version): numpy's verdict is computed, not written down
    (OK, 1),
    (OK, 2),
    (OK, 3),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), } garbage", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}}", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2),, }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': 3, }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': [3, 2], }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2L), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2L), }", 3),
    ("{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 2), }", 1),
    ("{'descr': '<f4', 'fortran_order': 'False', 'shape': (3, 2), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': 1}", 1),
    ("{'descr': '<f4', 'fortran_order': False}", 1),
    ("{'descr': '<f4', 'shape': (3, 2), 'fortran_order': False, 'shape': (3, 2)}", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (True, 2), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 2), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2.0), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': ('3', 2), }", 1),
    ("{\"descr\": \"<f4\", 'fortran_order': False, 'shape': (3,2)}", 1),
    ("  {'descr':'<f4','fortran_order':False,'shape':(3,2)}  ", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2) # a comment\n}", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), ", 1),
    ("['descr', '<f4']", 1),
    ("{'descr': '<f4' 'fortran_order': False, 'shape': (3, 2)}", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'descr': '<i8'}", 1),
    ("{'descr': '<f4', 'fortran_order': Fals, 'shape': (3, 2)}", 1),
    ("{descr: '<f4', 'fortran_order': False, 'shape': (3, 2)}", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, ), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': ((3), 2), }", 1),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "(" * 200 + ")" * 200 + "), }", 1),
]


def numpy_verdict(data):
    try:
        return np.load(io.BytesIO(data)).shape
    except Exception as e:  # noqa: BLE001 (numpy's refusals come as several types)
        return type(e).__name__


@pytest.mark.parametrize("header,version", CASES, ids=range(len(CASES)))
def test_npy_header_as_numpy(tmp_path, header, version):
    data = npy_bytes(header, version)
    path = tmp_path / "x.npy"
    path.write_bytes(data)
    want = numpy_verdict(data)
    duplicate = header.count("'shape'") > 1 or header.count("'descr'") > 1
    try:
        ds = stoker.Dataset(str(path))
    except stoker.Error as e:
        assert "x.npy" in str(e)
        if duplicate:
            assert "twice" in str(e)
            return
        assert not isinstance(want, tuple), f"numpy reads {want}, stoker refused: {e}"
        return
    assert not duplicate, "a header with a key twice was read"
    assert isinstance(want, tuple), f"numpy refuses it ({want}), stoker read {len(ds)} rows"
    assert (len(ds),) + tuple(ds.fields[0]["shape"]) == want[:1] + want[1:], (ds.fields, want)


def test_npy_member_header_in_a_tar(tmp_path):
    """The same parser reads .npy members of WebDataset samples: a trailing-garbage header there
    is a corrupt member, named."""
    import tarfile
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as t:
        for i, hdr in enumerate([OK, OK.replace("}", "} garbage")]):
            data = npy_bytes(hdr, rows=3)
            ti = tarfile.TarInfo(f"s{i}.x.npy")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    ds = stoker.Dataset(str(path))
    assert ds[0]["x.npy"].shape == (3, 2)
    with pytest.raises(stoker.Error, match="s.tar.*(corrupt|header)"):
        ds[1]
