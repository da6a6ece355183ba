"""What Trainer.fit shares with its callbacks: an exception one raised and a noted Ctrl-C, which stop fit
and reach the caller once fit has returned (never unwinding into C)."""


def _nothing_at_epoch_end(epoch, loss, accuracy):
    """The epoch-end call a main-thread fit makes when the caller set none: running Python code there
    lets Python run a pending SIGINT's handler (_interrupt.py)."""
    return False


class _CallbackState:
    """What fit's callbacks share with fit: the error one raised, and the interrupt noted while fit
    runs. Held by the callbacks instead of the Trainer, so that a Trainer is in no reference cycle and
    frees its memory when its last reference goes."""

    def __init__(self):
        self.error = None
        self.interrupt = None  # while fit runs: its _interrupt.NotedInterrupt

    def guarded(self, function):
        """`function` as fit calls it: True stops fit, an exception stops it and is kept for fit to
        raise (it must not unwind into C), and so does a noted Ctrl-C, once the call has run."""
        def call(*args):
            if self.error is not None:
                return 1
            try:
                stop = function(*args[:-1])
            except BaseException as error:
                self.error = error
                return 1
            return 1 if stop or (self.interrupt is not None and self.interrupt.noted) else 0
        return call
