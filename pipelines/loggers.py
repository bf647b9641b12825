"""The console logger of devicefit's jobs: Dagster's coloured console logger, less the
traceback of a step or run stopped by SIGINT/SIGTERM. A stop is expected, not a fault, and
`devicefit run` reports it in one line (pipelines/run_watch.py); the run's own event log in
the UI still holds the full record."""
import logging

import dagster as dg

INTERRUPTS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt", "RunInterrupted"}


def is_interrupt_record(record: logging.LogRecord) -> bool:
    event = getattr(record, "dagster_event", None)
    error = getattr(getattr(event, "event_specific_data", None), "error", None)
    if error is not None:  # a failure with its exception: judged by the exception's class alone
        return getattr(error, "cls_name", None) in INTERRUPTS
    return any(name in record.getMessage() for name in INTERRUPTS)  # "Execution of run failed: KeyboardInterrupt"


class _DropInterrupts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not is_interrupt_record(record)


@dg.logger(dg.colored_console_logger.config_schema, description="Dagster's console logger, quiet about SIGINT/SIGTERM stops.")
def console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_DropInterrupts())
    return logger
