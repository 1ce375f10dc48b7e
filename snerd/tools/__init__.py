"""The CLI subcommands of ``snerdmq``, one module each (registered in ``snerd.cli``)."""
