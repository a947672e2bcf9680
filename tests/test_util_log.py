"""util/log.py: loggers that import `logging` only once a record could be emitted."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from hloc.util import log as hloc_log

pytestmark = pytest.mark.pure


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)


def test_records_below_the_threshold_do_not_import_logging():
    out = _run("import sys\n"
               "from hloc.util.log import configure, get_logger\n"
               "configure(False)\n"
               "log = get_logger('hloc.x')\n"
               "log.debug('d %s', 1); log.info('i')\n"
               "print('logging' in sys.modules, log.isEnabledFor(10), log.isEnabledFor(30))\n"
               "log.warning('w %d', 7)\n"
               "print('logging' in sys.modules)\n")
    assert out.stdout.split() == ["False", "False", "True", "True"]
    assert out.stderr == "hloc.x: w 7\n"  # the command's format, applied when it was imported


def test_debug_configuration_shows_debug_records():
    out = _run("from hloc.util.log import configure, get_logger\n"
               "configure(True)\n"
               "get_logger('hloc.y').debug('d %s', 'x')\n")
    assert out.stderr == "hloc.y: d x\n"


def test_without_a_configuration_warnings_still_show():
    """As Python's last-resort handler shows them when nothing configured logging."""
    out = _run("from hloc.util.log import get_logger\n"
               "log = get_logger('hloc.z'); log.info('no'); log.error('e')\n")
    assert out.stderr == "e\n"


def test_with_logging_imported_records_reach_the_real_logger(caplog):
    """Once logging is imported (here by pytest), every record goes to logging, which
    filters it, and reads as logged by the caller."""
    log = hloc_log.get_logger("hloc.test_util_log")
    with caplog.at_level(logging.DEBUG, logger="hloc.test_util_log"):
        log.debug("value %d", 3)
        log.warning("careful")
    records = [(r.levelno, r.getMessage(), r.funcName) for r in caplog.records]
    assert records == [(logging.DEBUG, "value 3", "test_with_logging_imported_records_reach_the_real_logger"),
                       (logging.WARNING, "careful", "test_with_logging_imported_records_reach_the_real_logger")]
    assert log.isEnabledFor(logging.DEBUG) is False  # back at the logger's own level
