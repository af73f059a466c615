"""Options several `retrain` commands share: those generated from a settings dataclass, so a
command never restates a default, and `--domain`.

Each field declared with `dataplane.settings.setting` becomes `--field-name` with the field's type,
default and help; the command reads the values back by field name.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from domains.registry import DEFAULT_DOMAIN, DomainNotFoundError, load_domain


def settings_options(parser: argparse.ArgumentParser, source: type) -> None:
    """One option per field of the settings dataclass `source`: its name, type, default and help."""
    for spec in dataclasses.fields(source):
        parser.add_argument(
            f"--{spec.name.replace('_', '-')}",
            dest=spec.name,
            type=type(spec.default),
            default=spec.default,
            help=f"{spec.metadata['help']} (default {spec.default})",
        )


def settings_values(args: argparse.Namespace, source: type) -> dict[str, Any]:
    """The values of the options `settings_options` declared for `source`, by field name."""
    return {spec.name: getattr(args, spec.name) for spec in dataclasses.fields(source)}


def domain_option(parser: argparse.ArgumentParser) -> None:
    """`--domain NAME`: an installed domain (refused when the options are parsed), default retail."""
    parser.add_argument(
        "--domain",
        default=DEFAULT_DOMAIN,
        type=installed_domain,
        help=f"the domain (default {DEFAULT_DOMAIN}; `retrain domains` lists the installed ones)",
    )


def installed_domain(name: str) -> str:
    try:
        load_domain(name)
    except DomainNotFoundError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return name
