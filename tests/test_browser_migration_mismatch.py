"""The dashboard's start, in a real browser, on a database whose applied migration differs from its file
(issue 24 #2): the failure page names the file and says what to do; no page of data behind it."""

from __future__ import annotations

import psycopg
import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_an_edited_migration_stops_the_dashboard_naming_the_file(db, page, screenshot):
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("UPDATE core_schema_migrations SET sha256 = repeat('0', 64) WHERE version = 36")
    proc, url = start_streamlit({"PG_AGENTES": db.dsn})
    try:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(url)
        expect(page.get_by_role("heading", name="No se puede abrir la base de datos de los agentes")).to_be_visible(
            timeout=60_000
        )
        expect(page.get_by_text("036_register_chain.sql was edited after it was applied")).to_be_visible()
        expect(page.get_by_text("Su esquema no es el que espera esta versión")).to_be_visible()
        expect(page.get_by_role("button", name="Reintentar")).to_be_visible()
        screenshot("migration-mismatch")
    finally:
        stop_streamlit(proc)


def test_a_shallow_saver_database_stops_the_dashboard_saying_what_needs_its_history(create_database, page, screenshot):
    from format_agents import shallow_database

    dsn = create_database(migrated=False)
    shallow_database(dsn, "shallow-1")
    proc, url = start_streamlit({"PG_AGENTES": dsn})
    try:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(url)
        expect(page.get_by_role("heading", name="No se puede abrir la base de datos de los agentes")).to_be_visible(
            timeout=60_000
        )
        expect(page.get_by_text("the checkpoint tables were created by ShallowPostgresSaver")).to_be_visible()
        expect(page.get_by_text("Sus tablas de checkpoints las creó")).to_be_visible()
        screenshot("shallow-saver")
    finally:
        stop_streamlit(proc)
