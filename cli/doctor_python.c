/*
 * doctor_python.c: `stoker doctor --python SCRIPT`: run the user's script under the Python
 * profiler (python3 -m stoker.doctor, python/stoker/doctor.py) in a child process and keep its
 * JSON report for the verdict.
 */
#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the Python profiler ---- */

/* The interpreter: $STOKER_PYTHON, else Debian's /usr/bin/python3, else python3 on PATH. */
static const char *python_interpreter(void)
{
    const char *env = getenv("STOKER_PYTHON");
    if (env && *env)
        return env;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* Read a whole (small) file into a NUL-terminated heap string; NULL if unreadable. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1 || cap >= (64u << 20))
            break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) {
            free(buf);
            buf = NULL;
        }
        buf = grown;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* In the child: the environment the profiler and the script see, then exec. PYTHONPATH gets
 * the build tree's python/ beside this executable first, so `stoker` imports from there. */
static void exec_profiler(const doctor *d, char **argv, int err_fd)
{
    char exe[4096], *pp = NULL;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        const char *old = getenv("PYTHONPATH");
        if (asprintf(&pp, "%s/python%s%s", exe, old && *old ? ":" : "", old ? old : "") > 0)
            setenv("PYTHONPATH", pp, 1);
    }
    size_t len = 1;
    for (int i = 0; i < d->a.n_paths; i++)
        len += strlen(d->a.paths[i]) + 1;
    char *data = calloc(len, 1);
    for (int i = 0; data && i < d->a.n_paths; i++) {
        if (i)
            strcat(data, ":");
        strcat(data, d->a.paths[i]);
    }
    if (data)
        setenv("STOKER_DATA", data, 1);
    setenv("STOKER_RECIPE", d->a.recipe, 1);
    if (d->a.json) /* stdout carries only the doctor's JSON: the script prints to stderr */
        dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t w = write(err_fd, &e, sizeof(e));
    (void)w;
    _exit(127);
}

/* Run the script under `python3 -m stoker.doctor --json-out TMP [--steps N] SCRIPT ARGS...`
 * and keep its JSON report in d->py_json. Returns 0 or 1 (error printed). */
int stk_doctor_run_python(doctor *d)
{
    const doctor_args *a = &d->a;
    struct stat sb;
    const char *tmpdir = getenv("TMPDIR");
    char tmp[4096], steps[32];
    snprintf(tmp, sizeof(tmp), "%s/stoker-doctor-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0)
        return stk_cli_error("doctor", "%s: cannot create the report file: %s", tmp,
                             strerror(errno));
    close(fd);
    snprintf(steps, sizeof(steps), "%lld", a->steps ? a->steps : PY_STEPS);
    const char *py = python_interpreter();
    char **argv = calloc((size_t)a->n_script_args + 10, sizeof(*argv));
    int n = 0, pipefd[2] = {-1, -1}, rc = 1, status = 0, exec_errno = 0;
    if (!argv || pipe2(pipefd, O_CLOEXEC) != 0) {
        stk_cli_error("doctor", "cannot start %s: %s", py, strerror(errno));
        goto out;
    }
    argv[n++] = (char *)py;
    argv[n++] = "-m";
    argv[n++] = "stoker.doctor";
    argv[n++] = "--json-out";
    argv[n++] = tmp;
    argv[n++] = "--steps";
    argv[n++] = steps;
    argv[n++] = (char *)a->script;
    for (int i = 0; i < a->n_script_args; i++)
        argv[n++] = a->script_args[i];
    if (!a->json && !a->quiet && isatty(STDERR_FILENO))
        fprintf(stderr,
                "stoker doctor: running %s under the profiler (%s -m stoker.doctor, "
                "%s steps)\n",
                a->script, py, steps);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        stk_cli_error("doctor", "cannot start %s: %s", py, strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(pipefd[0]);
        exec_profiler(d, argv, pipefd[1]);
    }
    close(pipefd[1]);
    pipefd[1] = -1;
    if (read(pipefd[0], &exec_errno, sizeof(exec_errno)) <= 0)
        exec_errno = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (stat(tmp, &sb) == 0 && sb.st_size > 0 && (d->py_json = read_text(tmp)) &&
        (*stk_cli_json_ws(d->py_json) != '{' || !stk_json_valid(d->py_json))) {
        free(d->py_json);
        d->py_json = NULL;
    }
    if (exec_errno) {
        stk_cli_error("doctor", "cannot run the Python interpreter '%s': %s (set STOKER_PYTHON)",
                      py, strerror(exec_errno));
    } else if (WIFSIGNALED(status)) {
        stk_cli_error("doctor", "%s under the profiler was killed by signal %d (%s)", a->script,
                      WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0) {
        /* The profiler's report says why when it got that far. */
        const char *se = d->py_json ? stk_cli_json_get(d->py_json, "script_error") : NULL;
        char why[ADVICE_LEN] = "see its messages above";
        if (se && *se == '"')
            stk_cli_json_str(se, why, sizeof(why));
        else if (d->py_json && stk_cli_json_num(d->py_json, "steps") == 0)
            snprintf(why, sizeof(why),
                     "it iterated no DataLoader or stoker.Loader: nothing "
                     "to measure");
        stk_cli_error("doctor",
                      "%s failed under the profiler (%s -m stoker.doctor): exit "
                      "status %d: %s",
                      a->script, py, WEXITSTATUS(status), why);
    } else if (!d->py_json) {
        stk_cli_error("doctor", "%s -m stoker.doctor wrote no JSON report to %s", py, tmp);
    } else {
        rc = 0;
    }
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    free(argv);
    unlink(tmp);
    return rc;
}
