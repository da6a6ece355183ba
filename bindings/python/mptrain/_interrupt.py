"""Ctrl-C during Trainer.fit: the library's fit runs in C, where Python cannot raise KeyboardInterrupt,
and Python runs a signal's handler only when it next runs Python code, which in fit is a callback.
There a raise would be lost: ctypes cannot carry an exception out of a callback, and the handler
runs as the callback is entered, before any code of it that could catch the exception. So while
fit runs on the main thread, SIGINT is only noted; fit's callbacks see the note and stop fit, and
the handler that was in place (KeyboardInterrupt, by default) runs once fit has returned."""
import signal
import threading


class NotedInterrupt:
    """A context in which SIGINT on the main thread is noted (`noted`) instead of handled, and
    handled as it would have been on leaving. Elsewhere, or when SIGINT is ignored or left to the
    system's default action (no Python handler to defer), it changes nothing."""

    def __init__(self):
        self.noted = False
        self._previous = None

    @property
    def active(self):
        """Whether SIGINT is being noted here (else it acts as it did)."""
        return self._previous is not None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self._previous = previous
                signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum, frame):
        self.noted = True

    def __exit__(self, kind, value, traceback):
        previous, self._previous = self._previous, None
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
            if self.noted:
                previous(signal.SIGINT, None)  # raises KeyboardInterrupt by default
        return False
