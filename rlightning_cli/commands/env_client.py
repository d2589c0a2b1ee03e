"""``rlightning env-client --connect HOST:PORT CONFIG_OR_ENV_SPEC``: serve an env to a run's remote env server."""

from __future__ import annotations

import click


@click.command("env-client")
@click.argument("spec", metavar="CONFIG_OR_ENV_SPEC")
@click.option("--connect", "address", required=True, metavar="HOST:PORT",
              help="Address of the run's env server (logged by the run, and in env.params.address_file).")
@click.option("--token", envvar="RLIGHTNING_ENV_TOKEN", show_envvar=True, default=None,
              help="The run's shared token (prefer the environment variable: arguments show in `ps`).")
@click.option("--env", "env_name", default=None, metavar="NAME",
              help="Which env entry of a config file to serve (default: the first).")
@click.option("--num-envs", type=click.IntRange(min=1), default=None,
              help="Envs to serve; must equal the server's num_envs / num_clients (default: from the config, "
                   "or 1 for a TYPE:ID spec).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the envs until the server resets them with its own seeds.")
@click.option("--name", default=None, help="Name shown in the server's logs (default: host-pid).")
@click.option("--retry-s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Keep reconnecting this long after the connection is lost (or the server is full).")
@click.option("--no-reconnect", is_flag=True, help="Exit at the first lost connection.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def env_client(spec: str, address: str, token: str | None, env_name: str | None, num_envs: int | None, seed: int,
               name: str | None, retry_s: float, no_reconnect: bool, log_level: str) -> int:
    # Not a raw string: click's no-rewrap marker is the backspace character "\b", not a backslash and a "b".
    """Serve an env to a run whose env type is `remote`, until the run ends.

    CONFIG_OR_ENV_SPEC is either a config file (its env entry; a `remote` entry serves its params.local_env,
    with num_envs / num_clients envs) or TYPE:ID, e.g. gymnasium:CartPole-v1. Examples:

    \b
      rlightning env-client --connect 127.0.0.1:5555 --num-envs 8 gymnasium:CartPole-v1
      RLIGHTNING_ENV_TOKEN=... rlightning env-client --connect 10.0.0.5:5555 examples/cartpole_ppo_remote.yaml
    """  # noqa: D301
    from rlightning_cli.commands.train import setup_logging
    from rlightning_core.env.remote.client import EnvClient, build_client_worker, parse_address

    if not token:
        raise click.UsageError("a token is needed: --token TOKEN or the RLIGHTNING_ENV_TOKEN environment variable")
    setup_logging(log_level.upper())
    host_port = parse_address(address)
    worker = build_client_worker(spec, num_envs=num_envs, seed=seed, env_name=env_name)
    try:
        client = EnvClient(worker, host_port, token=token, name=name, reconnect=not no_reconnect, retry_s=retry_s)
        click.echo(f"env-client: serving {worker.num_envs} env(s) of {spec} to {host_port[0]}:{host_port[1]}",
                   err=True)
        reason = client.serve()
    finally:
        worker.close()
    click.echo(f"env-client: done after {client.steps} steps ({reason or 'closed'})", err=True)
    return 0
