/*
 * The pod sandbox's process (what Kubernetes' pause image runs): it holds the pod's namespaces
 * open while the pod's containers come and go. As the PID namespace's init it reaps the
 * orphans handed to it; SIGINT or SIGTERM, which an init would otherwise ignore, end it with
 * status 0; it does nothing else. Built static by hack/image.sh into localhost/twc/pause:3.10:
 *
 *   gcc -static -Os -s -o pause hack/image/pause.c
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  int saved = errno;
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static int on(int sig, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    puts("pause 3.10 (temporal-worker-controller, hack/image/pause.c)");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not PID 1, so orphans are not reaped here\n");
  }
  if (on(SIGINT, stop, 0) || on(SIGTERM, stop, 0) || on(SIGCHLD, reap, SA_NOCLDSTOP | SA_RESTART)) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
