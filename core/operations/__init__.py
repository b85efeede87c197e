"""Operations: the sweep job and its reads, the outage drill."""
