package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gantry-dev/gantry/pkg/gantryclient"
)

func runServices(args []string, stdout, stderr io.Writer) int {
	return runGroup("services", "Services: the credentials each service may read. Every write is a new revision.", servicesActions(), args, stdout, stderr)
}

func servicesActions() []subcommand {
	return []subcommand{
		{name: "list", summary: "list current services",
			examples: "  gantry services list\n", run: servicesList},
		{name: "get", args: []string{"ID"}, summary: "show a service and its credentials (names and keys, no values)",
			examples: "  gantry services get orders\n", run: servicesGet},
		{name: "map", args: []string{"ID", "CRED..."}, summary: "map credentials to a service (creates the service if needed)",
			examples: "  gantry services map orders 3f0c... 9a1b...\n  gantry services map prod-orders 3f0c... -reason 'new queue credential'\n",
			details:  heldNote, flags: serviceChangeFlags, run: servicesMap},
		{name: "unmap", args: []string{"ID", "CRED..."}, summary: "remove credentials from a service's mapping",
			examples: "  gantry services unmap orders 3f0c...\n", details: heldNote, flags: serviceChangeFlags, run: servicesUnmap},
		{name: "history", args: []string{"ID"}, summary: "every revision of the mapping, oldest first",
			examples: "  gantry services history orders\n", run: servicesHistory},
		{name: "revert", args: []string{"ID", "REV"}, summary: "write a new revision with the mapping of revision REV",
			examples: "  gantry services revert orders 1\n  gantry services revert prod-orders 1 -reason 'outage' -break-glass\n",
			details:  heldNote, flags: serviceChangeFlags, run: servicesRevert},
	}
}

// serviceChangeFlags are the -reason and -break-glass of the service writes.
func serviceChangeFlags(fs *flag.FlagSet) any { return addChangeFlags(fs) }

func servicesList(ctx context.Context, env *cliEnv, _ []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	services, err := api.ListServices(ctx)
	if err != nil {
		return err
	}
	return printServices(env, services)
}

func servicesGet(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	svc, err := api.GetService(ctx, args[0], true)
	if err != nil {
		return err
	}
	return printService(env, svc)
}

func servicesMap(ctx context.Context, env *cliEnv, args []string, flags any) error {
	return remap(ctx, env, args[0], flags.(*changeFlags), func(ids []string) []string {
		for _, id := range args[1:] {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		return ids
	})
}

func servicesUnmap(ctx context.Context, env *cliEnv, args []string, flags any) error {
	return remap(ctx, env, args[0], flags.(*changeFlags), func(ids []string) []string {
		return slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(args[1:], id) })
	})
}

// remap reads the service's mapping, changes it and writes it back whole, keeping the service's
// enabled flag and account; a service that does not exist yet starts with an empty mapping.
func remap(ctx context.Context, env *cliEnv, id string, flags *changeFlags, edit func([]string) []string) error {
	change, err := flags.change()
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	in := gantryclient.ServiceInput{}
	current, err := api.GetService(ctx, id, true)
	switch {
	case gantryclient.IsStatus(err, http.StatusNotFound):
		// PUT creates it.
	case err != nil:
		return err
	default:
		enabled := current.Enabled
		in.Enabled, in.Account = &enabled, current.Account
		for _, c := range current.Credentials {
			in.Credentials = append(in.Credentials, c.ID)
		}
	}
	in.Credentials = edit(in.Credentials)
	svc, err := api.PutService(ctx, id, in, change)
	if err != nil {
		return reportHeld(env, err)
	}
	return printService(env, svc)
}

func servicesHistory(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	revisions, err := api.ServiceHistory(ctx, args[0])
	if err != nil {
		return err
	}
	return printServices(env, revisions)
}

func servicesRevert(ctx context.Context, env *cliEnv, args []string, flags any) error {
	rev, _, err := revisionArgs(args[1], args[1])
	if err != nil {
		return err
	}
	change, err := flags.(*changeFlags).change()
	if err != nil {
		return err
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	svc, err := api.RevertService(ctx, args[0], rev, change)
	if err != nil {
		return reportHeld(env, err)
	}
	return printService(env, svc)
}

// withoutValues strips the values of a service's credentials: only gantry env uses them.
func withoutValues(svc gantryclient.Service) gantryclient.Service {
	creds := make([]gantryclient.Credential, len(svc.Credentials))
	for i, c := range svc.Credentials {
		creds[i] = c.WithoutValues()
	}
	svc.Credentials = creds
	return svc
}

func printService(env *cliEnv, svc gantryclient.Service) error {
	svc = withoutValues(svc)
	if env.json {
		return printJSON(env.stdout, svc)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", svc.ID)
	fmt.Fprintf(tw, "revision\t%d\n", svc.Revision)
	fmt.Fprintf(tw, "enabled\t%t\n", svc.Enabled)
	if svc.Account != nil {
		fmt.Fprintf(tw, "account\t%s\n", *svc.Account)
	}
	fmt.Fprintf(tw, "modified\t%s by %s\n", svc.ModifiedDate, svc.ModifiedBy)
	fmt.Fprintf(tw, "credentials\t%d\n", len(svc.Credentials))
	for _, c := range svc.Credentials {
		fmt.Fprintf(tw, "  %s\t%s (rev %d, keys %s)\n", c.ID, c.Name, c.Revision, strings.Join(c.CredentialKeys, ","))
	}
	return tw.Flush()
}

func printServices(env *cliEnv, services []gantryclient.Service) error {
	for i := range services {
		services[i] = withoutValues(services[i])
	}
	if env.json {
		if services == nil {
			services = []gantryclient.Service{}
		}
		return printJSON(env.stdout, services)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tREV\tENABLED\tMODIFIED\tBY")
	for _, s := range services {
		fmt.Fprintf(tw, "%s\t%d\t%t\t%s\t%s\n", s.ID, s.Revision, s.Enabled, s.ModifiedDate, s.ModifiedBy)
	}
	return tw.Flush()
}
