"""Bad settings are one line naming the variable (or flag), its value and what is wrong: no traceback,
no secret echoed, and no read command on a throwaway empty store (``chdb://`` with no directory)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from infercost.cli import main


@pytest.mark.parametrize("env, line", [
    ({"INFERCOST_RETENTION_DAYS": "abc"},
     "Error: INFERCOST_RETENTION_DAYS='abc': Input should be a valid integer, unable to parse string as an integer"),
    ({"INFERCOST_RECEIVER_PORT": "99999"},
     "Error: INFERCOST_RECEIVER_PORT='99999': Input should be less than or equal to 65535"),
    ({"INFERCOST_CLICKHOUSE_URL": "nonsense://x"},
     "Error: INFERCOST_CLICKHOUSE_URL='nonsense://x': unsupported store URL 'nonsense://x': use chdb://<directory>, "
     "chdb://memory or http(s)://user:pass@host:8123/db"),
    ({"INFERCOST_CLICKHOUSE_URL": "chdb://"},
     "Error: INFERCOST_CLICKHOUSE_URL='chdb://': chdb:// needs a directory (chdb://<directory>) or chdb://memory"),
    # the password of a store URL is masked in the message
    ({"INFERCOST_CLICKHOUSE_URL": "http://u:secretpw@h:8123/bad-db"},
     "Error: INFERCOST_CLICKHOUSE_URL='http://u:***@h:8123/bad-db': not a valid ClickHouse identifier: 'bad-db' "
     "(letters, digits, '_'; not starting with a digit)"),
    # every bad value is named, in one line
    ({"INFERCOST_RETENTION_DAYS": "0", "INFERCOST_ALLOW_UNAUTHENTICATED": "maybe"},
     "Error: INFERCOST_RETENTION_DAYS='0': Input should be greater than or equal to 1; INFERCOST_ALLOW_UNAUTHENTICATED="
     "'maybe': Input should be a valid boolean, unable to interpret input"),
])
def test_a_bad_environment_variable_is_one_line_naming_it(tmp_path, monkeypatch, env, line):
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    result = CliRunner().invoke(main, ["cost", "--since", "1h"], env={"INFERCOST_DATA_DIR": str(tmp_path), **env})
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [line]
    assert "secretpw" not in result.output


def test_a_bad_flag_is_named_as_the_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["migrate", "--retention-days", "0"], env={"INFERCOST_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --retention-days 0: Input should be greater than or equal to 1"
    assert not (tmp_path / "clickhouse").exists()  # nothing was created
