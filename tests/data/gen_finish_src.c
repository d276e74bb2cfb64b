/*
 * gen_finish_src.c: print the finishing kernel's CUDA source exactly as the library hands it to
 * NVRTC, so `make check-ptx` compiles the same text with nvcc.
 */
#include "cuda/stk_finish.h"

#include <stdio.h>

int main(void)
{
    fputs(stk__finish_source(), stdout);
    return 0;
}
