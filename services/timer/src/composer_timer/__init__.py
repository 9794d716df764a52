"""Composer timer: fires due WAIT and WAIT_FOR_EVENT timers (TimerFired) through the engine."""
