"""``infercost dashboard``: not built yet (see the open issues)."""

from __future__ import annotations

import click


@click.command(name="dashboard", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args):
    """Not built yet."""
    raise click.ClickException("'infercost dashboard' is not built yet")
