def test_demo_db_has_rows(demo_db):
    assert demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"] > 0
