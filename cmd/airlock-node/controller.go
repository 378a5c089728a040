package main

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/kube/controller"
)

func newControllerCmd(f *flags) *cobra.Command {
	var grace time.Duration
	var printRBAC bool
	var user, serviceAccount string
	cmd := &cobra.Command{
		Use:   "controller [--kubeconfig FILE] [--grace D]",
		Short: "Fail the pods of airlock nodes whose lease expired (one per cluster)",
		Long: `Watch the airlock nodes' leases and fail the pods of a node whose lease has
gone unrenewed for its duration (airlock node --lease-duration, 40s by
default) plus --grace: phase Failed, reason AirlockNodeLost, each container
terminated with exit code 137, and a DisruptionTarget condition. A node
killed or cut off cannot say its pods' programs are gone, and Kubernetes
lets no other node say it for it; without this they stay Running until the
taint-based eviction deletes them, and then Terminating.

Run one per cluster, anywhere with a kubeconfig. Its credentials need only
the roles --print-rbac prints: read nodes, their leases and pods, update
pods' status, record events. Nothing is deleted and nothing is restarted:
a batch (airlock batch --engine kube) runs a lost node's jobs again, and a
node that comes back ends the sandboxes of its failed pods.

Time is this process's: a lease is expired once its renewal has not
changed here for that long, whatever the node's clock says. A restarted
controller gives every node a whole period again.`,
		Example: `  airlock node controller --print-rbac --user airlock-controller | kubectl apply -f -
  airlock node controller --kubeconfig /etc/airlock/controller.kubeconfig
  airlock node controller --print-rbac --service-account airlock/controller | kubectl apply -f -`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printRBAC {
				b, err := controller.RBAC(user, serviceAccount)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if cmd.Flags().Changed("user") || cmd.Flags().Changed("service-account") {
				return fmt.Errorf("%w: --user and --service-account name the subject of --print-rbac's bindings; the controller itself runs as its kubeconfig's user", errdefs.ErrInvalidArgument)
			}
			err := controller.Run(cmd.Context(), controller.Config{Kubeconfig: f.kubeconfig, Grace: grace, Log: logger(cmd, f)}, func() {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock node controller: watching the airlock nodes' leases")
			})
			if err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&grace, "grace", 10*time.Second, "how long past a lease's duration a node is given before its pods fail")
	fl.BoolVar(&printRBAC, "print-rbac", false, "print the controller's roles and bindings as YAML for kubectl apply, and exit")
	fl.StringVar(&user, "user", controller.Name, "with --print-rbac: the user the controller's credentials name")
	fl.StringVar(&serviceAccount, "service-account", "", "with --print-rbac: bind a service account NAMESPACE/NAME instead")
	return cmd
}
