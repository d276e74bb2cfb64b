# test_npy_fields.sh: the NumPy dict form on the command line: `stoker inspect|verify
# image=x.npy label=y.npy` names one field per file (stk_dataset_opts.field_names); a file whose
# name holds '=' is still a file; bad input names the field or the file.
# Run by scripts/run_cli_tests.sh in a fresh temp dir with $STOKER set.
. "$(dirname "$0")/lib.sh"

$PY - <<'PYEOF'
import numpy as np
np.save("feats.npy", np.arange(24, dtype=np.float32).reshape(6, 4))
np.save("targets.npy", np.arange(6, dtype=np.int64))
np.save("short.npy", np.arange(5, dtype=np.int64))
np.save("a=b.npy", np.arange(6, dtype=np.int64))
PYEOF

"$STOKER" inspect --json image=feats.npy label=targets.npy > info.json || fail "inspect named"
$PY -c '
import json
d = json.load(open("info.json"))
assert d["format"] == "npy" and d["records"] == 6, d
assert [f["name"] for f in d["fields"]] == ["image", "label"], d["fields"]
' || fail "inspect named: $(cat info.json)"
expect 0 "6 records" "$STOKER" verify image=feats.npy label=targets.npy
# a file named with '=' is a file (its field named after it, a name that cannot be a field's),
# not NAME=PATH
expect 1 "a=b.npy: field name 'a=b' has a character outside" "$STOKER" inspect a=b.npy
expect 1 "short.npy has 5 rows but feats.npy has 6" "$STOKER" inspect x=feats.npy y=short.npy
expect 1 "field 'x': *.npy names 4 files" "$STOKER" inspect 'x=*.npy'
expect 1 "missing.npy" "$STOKER" inspect x=missing.npy
echo "test_npy_fields: ok"
