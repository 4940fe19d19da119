/* The subcommands of kprof; each returns a process exit code (cli.h). */
#ifndef KP_COMMANDS_H
#define KP_COMMANDS_H

int kp_cmd_convert(int argc, char **argv);
int kp_cmd_internal(int argc, char **argv);
int kp_cmd_push(int argc, char **argv);
int kp_cmd_record(int argc, char **argv);
int kp_cmd_report(int argc, char **argv);
int kp_cmd_dump(int argc, char **argv);
int kp_cmd_tiers(int argc, char **argv);
int kp_cmd_top(int argc, char **argv);
int kp_cmd_trace(int argc, char **argv);

#endif
