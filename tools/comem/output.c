/* tools/comem/output.c - output that could not be written is a failure (cli_flush, cli_finish_output: cmds.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cmds.h"

static int g_out_err; /* the errno of the first write to stdout that failed; 0 while none has */

void cli_flush(void)
{
    /* The flush fails with its own errno; a write that failed before it (the stream's error flag)
       left errno saying why, as long as nothing failed since: hence right after the write. */
    if ((fflush(stdout) != 0 || ferror(stdout)) && !g_out_err)
        g_out_err = errno ? errno : EIO;
}

int cli_finish_output(int rc)
{
    cli_flush();
    if (!g_out_err)
        return rc;
    if (g_out_err == EPIPE)
        return 0; /* nobody is reading any more: nothing to report to */
    fprintf(stderr, "comem: cannot write output: %s\n", strerror(g_out_err));
    return rc ? rc : 1;
}
