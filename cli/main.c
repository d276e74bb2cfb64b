/*
 * main.c: the `stoker` executable's entry point. Everything else of the CLI is linked into the
 * Python extension too, so that `python -m stoker` and the `stoker` command pip installs run
 * the same code (stk_cli_main).
 */
#include "cli.h"

int main(int argc, char **argv)
{
    return stk_cli_main(argc, argv);
}
