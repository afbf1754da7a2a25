"""``infercost collector``: not built yet (see the open issues)."""

from __future__ import annotations

import click


@click.command(name="collector", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args):
    """Not built yet."""
    raise click.ClickException("'infercost collector' is not built yet")
