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
