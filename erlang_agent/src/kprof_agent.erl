%%% @doc The part of kprof that runs inside the profiled node.
%%%
%%% kprof's guiding rule is that the target node only emits: parsing,
%%% aggregation, formatting and files happen in the C program. This module is
%%% what the C program loads into a node (with code:load_binary/3, from the
%%% copy embedded in the kprof binary) before it asks for anything. For now it
%%% only identifies itself, so that the C side can tell whether the node
%%% already runs an agent of its own version or needs a fresh load.
-module(kprof_agent).

-include("kprof_version.hrl").

-export([version/0, modules/0]).

%% @doc The kprof version this agent was built with, e.g. "0.1.0".
-spec version() -> string().
version() ->
    ?KPROF_VERSION.

%% @doc The modules the agent consists of, in load order.
-spec modules() -> [module()].
modules() ->
    [kprof_agent].
