import io

from rlightning_core.engine.progress import ProgressBar


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_steps_sps_eval_and_eta_on_a_tty():
    out = FakeTTY()
    bar = ProgressBar(1000, stream=out, min_interval_s=0)
    bar.update(250, sps=500.0, train_s=0.5, eval_return=None)
    bar.update(500, sps=500.0, train_s=1.0, eval_return=123.4)
    bar.close()
    text = out.getvalue()
    assert "[#####" in text and "25%" in text and "250/1,000 steps" in text
    assert "50%" in text and "eval 123.4" in text and "ETA 1s" in text
    assert text.endswith("\n")


def test_progress_bar_stays_silent_when_not_a_tty():
    out = io.StringIO()
    bar = ProgressBar(10, stream=out)
    bar.update(5, sps=1.0, train_s=1.0, eval_return=None)
    bar.close()
    assert out.getvalue() == ""
