//! The `agentbox` binary's integration tests, in one test binary (one link for all of
//! them): each module is one area, run against the real binary with a temporary home.
//! Tests that need root or user namespaces skip with a reason on a developer machine and
//! fail under `CI=true` (see `agentbox_testkit::tier`).

mod agents;
mod common;

mod boxes;
mod broker;
mod bugs;
mod bundles;
mod capture;
mod checkpoint;
mod checkpoint_untracked;
mod cli;
mod config;
mod conformance;
mod cp;
mod crash;
mod destroy;
mod docker;
mod docker_checkpoint_file;
mod docker_checkpoint_import_names;
mod docker_history;
mod docker_prune;
mod docker_relay;
mod firsthour;
mod fork;
mod gitremote;
mod help;
mod leftovers;
mod mcp;
mod network;
mod output;
mod provider;
mod quickstart;
mod quiet_capture;
mod registry;
mod security;
mod serve;
mod sessions;
mod tools;
mod tournament;
