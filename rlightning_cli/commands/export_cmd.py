"""``rlightning export RUN_DIR --format onnx|torchscript``: the deterministic policy as a file to deploy."""

from __future__ import annotations

import click

FORMATS = ("onnx", "torchscript")


@click.command("export")
@click.argument("path", metavar="RUN_DIR_OR_CHECKPOINT", type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="onnx (needs pip install 'rlightning[export]') or torchscript.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Model file to write (default: RUN_DIR/export/policy.onnx or policy.pt); the input/output "
                   "spec goes beside it as .json.")
@click.option("--best", is_flag=True, help="Export the best-by-eval checkpoint instead of the latest.")
def export_command(path: str, fmt: str, output: str | None, best: bool) -> int:
    """Export a trained policy, observation preprocessing included, with its input/output spec."""
    from rlightning_cli.commands.train import setup_logging
    from rlightning_core.dependencies import require

    if fmt == "onnx":  # before torch is imported: a missing exporter is reported at once
        require(["onnx", "onnxscript"], pip="rlightning[export]", needed_by="rlightning export --format onnx")
    setup_logging("WARNING")
    from rlightning_core.export import export_policy

    model, spec = export_policy(path, fmt, output, best=best)
    click.echo(f"model: {model}")
    click.echo(f"spec: {spec}")
    return 0
