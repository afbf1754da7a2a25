"""The ``infercost`` command line: one sub-command per part of the service.

Each command lives in ``infercost/commands/<name>.py`` and is imported lazily, so ``--help`` is
fast and a command's heavy dependencies (Streamlit, the emulator) load only when it runs.
"""

from __future__ import annotations

import importlib

import click

# name -> (module under infercost.commands, one-line help shown in `infercost --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "migrate": ("migrate", "Create or upgrade the ClickHouse schema (idempotent)."),
    "collector": ("collector", "Run the OTLP/HTTP receiver (and the vLLM /metrics scraper)."),
    "spool": ("spool", "The receiver's spool: status, replay of quarantined records."),
    "emulate": ("emulate", "Run emulated vLLM replicas (live HTTP, or virtual time)."),
    "gateway": ("gateway", "Run the instrumented OpenAI-compatible gateway in front of replicas."),
    "load": ("load", "Drive agentic task workloads (chat, copilot, research agent) from real traces."),
    "cost": ("cost", "Cost per successful task: run the jobs, print the period summary."),
    "dashboard": ("dashboard", "Serve the Streamlit dashboard."),
    "alerts": ("alerts", "Run the alert evaluator (cascading degradation, SLO burn rates)."),
    "review": ("review", "Write the weekly cost review (HTML + Markdown)."),
    "plan": ("plan", "Capacity and cost planner: replay the workload on candidate fleets, recommend one."),
    "up": ("up", "Run receiver, jobs, alerts and dashboard in one process."),
    "demo": ("demo", "The whole product on emulated GPUs and real public traces, in one command."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"infercost.commands.{COMMANDS[name][0]}")
        return module.command

    def format_commands(self, ctx, formatter):
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="infercost")
def main():
    """infercost: cost per successful task and live operations for self-hosted LLM inference.

    Settings come from INFERCOST_* environment variables (see the README); flags override them.
    """
    from schema.redact import install_log_redaction

    install_log_redaction()  # no log line of any command shows a credential


if __name__ == "__main__":
    main()
