"""``infercost demo``: not built yet (see the open issues)."""

from __future__ import annotations

import click


@click.command(name="demo", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args):
    """Not built yet."""
    raise click.ClickException("'infercost demo' is not built yet")
