package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podLookup tells which containers of a pod are non-restartable init
// containers. CRI does not say: a container's config carries only the pod's
// name, namespace and UID in its labels.
type podLookup interface {
	initContainers(ctx context.Context, namespace, name, uid string) (map[string]bool, error)
	forget(uid string)
}

// apiPodLookup reads the pod from the API server with the node's own
// credentials (the node authorizer lets a node get the pods bound to it), once
// per pod UID: a pod's containers never change.
type apiPodLookup struct {
	client kubernetes.Interface

	mu    sync.Mutex
	byUID map[string]map[string]bool
}

func newAPIPodLookup(client kubernetes.Interface) *apiPodLookup {
	return &apiPodLookup{client: client, byUID: map[string]map[string]bool{}}
}

func (l *apiPodLookup) initContainers(ctx context.Context, namespace, name, uid string) (map[string]bool, error) {
	l.mu.Lock()
	inits, ok := l.byUID[uid]
	l.mu.Unlock()
	if ok && uid != "" {
		return inits, nil
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pod, err := l.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod: %w", err)
	}
	// A pod deleted and made again under the same name is another pod. The
	// mirror of a static pod has its own UID and names the static pod's.
	if uid != "" && string(pod.UID) != uid && pod.Annotations[corev1.MirrorPodAnnotationKey] != uid {
		return nil, fmt.Errorf("pod %s/%s is now UID %s, the container's is %s", namespace, name, pod.UID, uid)
	}
	inits = map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		// restartPolicy Always makes a sidecar: it keeps running like a regular container.
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			inits[c.Name] = true
		}
	}
	if uid != "" {
		l.mu.Lock()
		l.byUID[uid] = inits
		l.mu.Unlock()
	}
	return inits, nil
}

// forget drops a pod whose sandbox is gone; a later sandbox of the same pod
// only costs one more GET.
func (l *apiPodLookup) forget(uid string) {
	l.mu.Lock()
	delete(l.byUID, uid)
	l.mu.Unlock()
}
