"""Credentials nobody registered, as an agent's tools print them (``env``, ``cat .env``, a config
file, a key file), for the tests of the pattern-based masking (``mask_credentials``)."""

from __future__ import annotations

CREDENTIALS = {
    "AWS secret key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS access key id": "AKIAIOSFODNN7EXAMPLE",
    "GitHub token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "OpenAI key": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "Anthropic key": "sk-ant-api03-Xy9aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "Slack token": "xoxb-123456789012-abcdefABCDEF",
    "DSN password": "hunter2-prod-pw",
    "password setting": "Tr0ub4dor!3x",
    "bearer token": "eAbCdEf0123456789GhIjKlMn",
    "private key": "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
}
DUMP = f"""\
HOME=/home/dev
AWS_ACCESS_KEY_ID={CREDENTIALS["AWS access key id"]}
AWS_SECRET_ACCESS_KEY={CREDENTIALS["AWS secret key"]}
GITHUB_TOKEN={CREDENTIALS["GitHub token"]}
OPENAI_API_KEY={CREDENTIALS["OpenAI key"]}
ANTHROPIC_API_KEY={CREDENTIALS["Anthropic key"]}
SLACK_BOT_TOKEN={CREDENTIALS["Slack token"]}
DATABASE_URL=postgresql://app:{CREDENTIALS["DSN password"]}@db.internal:5432/prod
SMTP_PASSWORD={CREDENTIALS["password setting"]}
curl -H "Authorization: Bearer {CREDENTIALS["bearer token"]}" https://api.internal/v1
-----BEGIN RSA PRIVATE KEY-----
{CREDENTIALS["private key"]}
-----END RSA PRIVATE KEY-----
"""
"""An ``env`` dump, a command and a key file, holding every one of :data:`CREDENTIALS`."""


def leaked(text: str) -> list[str]:
    """Which of :data:`CREDENTIALS` ``text`` holds."""
    return [name for name, value in CREDENTIALS.items() if value in text]
