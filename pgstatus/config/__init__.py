"""
Configuration of pg-status, read from ``pg_status__*`` environment variables
(see :mod:`pgstatus.config.environ`), and the files they name.

The public names are handed on here; code inside pg-status imports them
from the module that defines them.
"""

from pgstatus.config.environ import load_config, log_settings
from pgstatus.config.files import (
    ENV_FILE,
    env_file_path,
    parse_env_file,
    process_environ,
    read_env_file,
    read_password_file,
    with_env_file,
)
from pgstatus.config.settings import PREFIX, Config, ConfigError, HostConfig
from pgstatus.config.table import SETTINGS, Setting, known_names

__all__ = [
    "ENV_FILE",
    "PREFIX",
    "SETTINGS",
    "Config",
    "ConfigError",
    "HostConfig",
    "Setting",
    "env_file_path",
    "known_names",
    "load_config",
    "log_settings",
    "parse_env_file",
    "process_environ",
    "read_env_file",
    "read_password_file",
    "with_env_file",
]
