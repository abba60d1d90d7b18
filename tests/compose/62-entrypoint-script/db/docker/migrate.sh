#!/bin/sh
until pg_isready -h db -p 5433; do sleep 1; done
exec psql -h db -p 5433 -f /migrations/all.sql
