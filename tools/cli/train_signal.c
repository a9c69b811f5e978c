/* train_signal.c - SIGINT and SIGTERM during `tgrad train` (see train_signal.h). */
#define _GNU_SOURCE /* sigaction, SA_RESTART */
#include "train_signal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/*
 * Ctrl-C (SIGINT) or SIGTERM: finish the current step, save the checkpoint, print the summary,
 * exit 130. The handler only marks the stop and write(2)s a message prepared by the loop before
 * each step ("stopping after step N, saving..."), so the user hears at once; a second signal
 * says the save is under way and changes nothing (SIGKILL still stops at once). The message
 * is double-buffered: the loop writes the buffer the handler is not reading, then switches.
 * The switch and the stop mark share one atomic word (g_state): the loop switches with a
 * compare-and-swap that fails once the mark is set, so the step the loop stops after is always
 * the one the printed message named, whichever thread the signal is delivered to (blocking it
 * in the loop's thread would not do: the kernel hands a process's signal to any thread that
 * does not block it, such as MPI's or OpenMP's).
 * The handlers are installed once the command line is parsed, so a signal during the setup
 * (reading the data, training the SentencePiece model, tokenizing, building) stops the run
 * too: the setup checks the mark between its stages and exits 130 before the first step,
 * nothing saved. A signal the process inherited as ignored (SIGINT in a background job of a
 * non-interactive shell, `nohup`-like launchers) stays ignored for the whole run, the Unix
 * convention: only the signals that were not ignored get the handler.
 */
#define STOP_MARK 2                 /* in g_state: a signal arrived */
static atomic_int g_state;          /* bit 0: the buffer the handler prints; STOP_MARK */
static volatile sig_atomic_t g_msg_len[2]; /* 0: print nothing (ranks > 0) */
static volatile sig_atomic_t g_setup;      /* 1 until the loop starts: repeat the message */
static char g_msg[2][192];
static const int g_sigs[2] = {SIGINT, SIGTERM};
static struct sigaction g_old[2]; /* the dispositions found (restored by tsig_restore) */
static bool g_installed[2];
#if ATOMIC_INT_LOCK_FREE != 2
#error "the signal handler needs a lock-free atomic int"
#endif

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    int old = atomic_fetch_or(&g_state, STOP_MARK);
    int i = old & 1;
    static const char again[] = "tgrad train: already stopping; the checkpoint is being saved "
                                "(a second signal does not interrupt it)\n";
    if (g_msg_len[i] > 0) {
        if (!(old & STOP_MARK) || g_setup)
            (void)!write(STDERR_FILENO, g_msg[i], (size_t)g_msg_len[i]);
        else
            (void)!write(STDERR_FILENO, again, sizeof again - 1);
    }
    errno = saved;
}

bool tsig_stop_requested(void) { return (atomic_load(&g_state) & STOP_MARK) != 0; }

bool tsig_arm(int64_t s, bool tty, bool checkpoint, bool print)
{
    int cur = atomic_load(&g_state);
    if (cur & STOP_MARK)
        return true;
    int next = !(cur & 1);
    int k = snprintf(g_msg[next], sizeof g_msg[next], "%stgrad train: stopping after step %"
                     PRId64 ", %s\n", tty ? "\n" : "", s,
                     checkpoint ? "saving the checkpoint..."
                                     : "then exiting (no --checkpoint: nothing is saved)");
    g_msg_len[next] = print && k > 0 && (size_t)k < sizeof g_msg[next] ? k : 0;
    /* the text before the switch; the switch fails once a signal has marked the stop */
    while (!(cur & STOP_MARK))
        if (atomic_compare_exchange_weak(&g_state, &cur, next)) {
            g_setup = 0;
            return false;
        }
    return true;
}

void tsig_install(bool print)
{
    static const char msg[] = "tgrad train: stopping before the first step (nothing is saved)\n";
    g_setup = 1;
    g_msg_len[1] = 0;
    g_msg_len[0] = print ? (sig_atomic_t)(sizeof msg - 1) : 0;
    memcpy(g_msg[0], msg, sizeof msg);
    atomic_store(&g_state, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* a save's system calls go on as if nothing happened */
    sigemptyset(&sa.sa_mask);
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < 2; i++) {
        sigaddset(&sa.sa_mask, g_sigs[i]);
        sigaddset(&set, g_sigs[i]);
    }
    for (int i = 0; i < 2; i++) {
        g_installed[i] = sigaction(g_sigs[i], NULL, &g_old[i]) == 0 &&
                         g_old[i].sa_handler != SIG_IGN &&
                         sigaction(g_sigs[i], &sa, NULL) == 0;
    }
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

void tsig_restore(void)
{
    for (int i = 0; i < 2; i++)
        if (g_installed[i]) {
            sigaction(g_sigs[i], &g_old[i], NULL);
            g_installed[i] = false;
        }
}

