# rename-0.3.sed: every rename of stoker 0.3 (issue 25, "one vocabulary"), as sed expressions,
# so that a branch written against 0.2 moves to the 0.3 names with one command, from the
# repository root (GNU sed; CHANGES.md, bench/RESULTS.md and this file keep the old names on
# purpose):
#
#   git ls-files -z -- '*.c' '*.h' '*.py' '*.sh' '*.md' '*.map' '*.def' \
#       ':!CHANGES.md' ':!bench/RESULTS.md' ':!scripts/rename-0.3.sed' \
#     | xargs -0 sed -i -E -f scripts/rename-0.3.sed
#
# Every expression is idempotent (running the command twice changes nothing the second time)
# and matches whole identifiers only. CHANGES.md says why each name changed. What sed cannot
# do (a struct that gained struct_size, stk_dataset_read without its error buffer) is listed
# in CHANGES.md under "By hand".

# ---- the public header (C) ----
s/\bSTK_FG_H\b/STOKER_H/g
s/\bstk_dataset_open_ex\b/stk_dataset_open_v2/g
s/\bstk_loader_state\b/stk_loader_save_state/g
s/\bstk_batch_size\b/stk_batch_n_samples/g
s/\bstk_dataset_count\b/stk_dataset_n_records/g
s/\bstk_writer_count\b/stk_writer_n_records/g
s/\bstk_format_count\b/stk_n_formats/g
s/\bstk_op_count\b/stk_op_n_kinds/g

# ---- library internals ----
s/\bstk__slot_alloc_ex\b/stk__slot_alloc_limit/g
s/\bfx_transform_ex\b/fx_transform_opts/g

# ---- ring slots: C's `prefetch` (slots of the batch ring) is `n_slots`; `prefetch` is left
# with one meaning, the Python/CLI one: batches prepared ahead of the one the consumer holds
# (n_slots = prefetch + 1). The VFS's byte read-ahead is `readahead`. ----
s/\b(o|opts|info|i|c|out)(\.|->)prefetch\b/\1\2n_slots/g
s/\brun\.info\.prefetch\b/run.info.n_slots/g
s/\bvfs->prefetch\b/vfs->readahead/g
s/\.prefetch = stk__remote_prefetch\b/.readahead = stk__remote_readahead/g
s/\(\*prefetch\)\(stk__file\b/(*readahead)(stk__file/g
s/\bstk__(remote|vfs|dataset)_prefetch\b/stk__\1_readahead/g
s/\bstk__prefetch_(admit|take|cached|forget)\b/stk__readahead_\1/g

# ---- the extension (stoker._core) follows the C names ----
s/\bnum_threads=/n_threads=/g
s/"num_threads"/"n_threads"/g
s/\bn_threads=([0-9A-Za-z_.]+), prefetch=/n_threads=\1, n_slots=/g
s/\bprefetch=self\.prefetch \+ 1\b/n_slots=self.prefetch + 1/g
s/\b(core|_core|old)\.state\(\)/\1.save_state()/g
s/\b(w|_w)\.count\b/\1.n_records/g
s/\bb\.size\b/b.n_samples/g
s/\bi\["prefetch"\]/i["n_slots"]/g

# ---- Python: stoker.Loader's n_threads= (num_workers= stays its DataLoader alias);
# info() and stats() say n_threads and n_slots ----
s/\["ring_slots"\]/["n_slots"]/g
s/\b(st|stats|info)\["num_workers"\]/\1["n_threads"]/g
s/\binfo\(\)\["num_workers"\]/info()["n_threads"]/g
s/\bstats\(\)\["num_workers"\]/stats()["n_threads"]/g

# ---- stk_op_param.count is n_values ----
s/\bpa->count\b/pa->n_values/g

# ---- the one JSON reader, public (a building block) ----
s/\bstk__json_valid\b/stk_json_valid/g
s/\bstk__json_member\b/stk_json_member/g

# ---- the CPU count, public ----
s/\bstk__cpu_count\b/stk_n_cpus/g
