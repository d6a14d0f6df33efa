"""Operations: check, report, status, metrics, import."""
