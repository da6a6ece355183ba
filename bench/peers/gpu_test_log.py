"""The doctest cases that failed, read from the GPU test programs' output: one program's (the device
check's diagnosis runs them one by one), or a `ctest -V -j` log of several, whose lines each test
prefixes with "N: " and interleaves. doctest prints a case's "TEST CASE:" header before its MESSAGEs
too, so a case counts only when an ERROR follows its header in its own program's lines.

  gpu_test_log.py < OUTPUT
      The failing cases of one program's output, sorted, a line each; "(not run: no time left)"
      when the device check skipped the program for lack of time (so that no case reads as passed)."""
import re
import sys

TIME_LEFT_NOTE = "skipped, no time left"  # what device_check.sh's `limited` prints instead of running


def program_failing_cases(lines):
    """The cases that failed in one program's output lines, in the order they failed."""
    current, failing = None, []
    for text in lines:
        if text.startswith("TEST CASE:"):
            current = text[len("TEST CASE:"):].strip()
        elif (" ERROR: " in text or " FATAL ERROR: " in text) and current:
            failing.append(current)
    return failing


def failing_cases(ctest_log):
    """The names of the cases that failed in a `ctest -V` log. A test that ctest lists as failed
    without such a case (a timeout, a crash) counts as a failing case named after the test, which
    names no switch. None when the log is missing or ctest did not finish it (no "tests passed"
    summary: the stage cut short, or skipped for lack of time): programs cut off before an ERROR
    would otherwise read as passed."""
    try:
        with open(ctest_log, errors="replace") as log:
            lines = log.read().splitlines()
    except OSError:
        return None
    if not any(re.match(r"\d+% tests passed", line) for line in lines):
        return None
    by_test, failed_tests, listing = {}, {}, False
    for line in lines:
        if line.startswith("The following tests FAILED:"):
            listing = True
            continue
        number, separator, rest = line.strip().partition(" - ")
        if listing and separator and number.isdigit():
            failed_tests[number] = rest
            continue
        test, separator, text = line.partition(": ")
        if separator and test.strip().isdigit():
            by_test.setdefault(test.strip(), []).append(text)
    failing = set()
    for test, texts in by_test.items():
        cases = program_failing_cases(texts)
        failing |= set(cases)
        if cases:
            failed_tests.pop(test, None)
    return failing | {f"test {what}, with no failing case named" for what in failed_tests.values()}


def main():
    lines = sys.stdin.read().splitlines()
    if any(line.startswith(TIME_LEFT_NOTE) for line in lines):
        print("(not run: no time left)")
    for case in sorted(set(program_failing_cases(lines))):
        print(case)


if __name__ == "__main__":
    main()
