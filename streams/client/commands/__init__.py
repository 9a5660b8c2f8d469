"""The `flotilla` command groups, one module each; `streams.client.cli` builds the parser from them."""


class CommandError(Exception):
    """A command cannot do what was asked for a reason found on this side (not the server's); the message is for the user."""
